import Foundation
import IdentifiedCollections
import TandemCore

// What an edit of a synced value touched: the value's bytes before the edit, compared with the
// edited value element by element, and the old value to put back when the edit cannot be written.
extension SyncedStore {
    /// The value before an edit: its elements' ids, in order, and (in `bytes`) their bytes.
    struct Fingerprint {
        var ids: [UUID]
    }

    static func fingerprint(_ value: IdentifiedArrayOf<Value>, into bytes: inout [UInt8]) -> Fingerprint {
        value.elements.withUnsafeBufferPointer { elements in
            let raw = UnsafeRawBufferPointer(elements)
            if bytes.count < raw.count { bytes = [UInt8](repeating: 0, count: raw.count) }
            bytes.withUnsafeMutableBytes { $0.copyMemory(from: raw) }
        }
        return Fingerprint(ids: value.ids.elements)
    }

    /// The indices of `value` whose element is not bytewise the one at that index before the edit,
    /// or nil when an element came, went or moved.
    static func differing(_ value: IdentifiedArrayOf<Value>, old: Fingerprint, bytes: [UInt8]) -> [Int]? {
        guard value.count == old.ids.count else { return nil }
        let size = MemoryLayout<Value>.size
        let stride = MemoryLayout<Value>.stride
        var differing: [Int] = []
        var moved = false
        bytes.withUnsafeBytes { before in
            value.elements.withUnsafeBufferPointer { elements in
                guard let now = elements.baseAddress, let was = before.baseAddress else { return }
                for index in elements.indices where memcmp(was + index * stride, now + index, size) != 0 {
                    guard elements[index].clientId == old.ids[index] else {
                        moved = true
                        return
                    }
                    differing.append(index)
                }
            }
        }
        return moved ? nil : differing
    }

    /// The value as it was before an edit that cannot be written: each element the store knows by
    /// its id, in the old order.
    func restored(_ value: IdentifiedArrayOf<Value>, old: Fingerprint, state: State) -> IdentifiedArrayOf<Value> {
        IdentifiedArray(uniqueElements: old.ids.compactMap { state.known[$0]?.value })
    }

    /// Whether an element whose bytes changed differs from what the store knew of it: by the
    /// model's `==`, or, where that calls them equal, by their bodies byte for byte. A string
    /// respelled (é decomposed for precomposed) is equal to Swift but another value to the server,
    /// which would otherwise keep the old spelling for good.
    static func differs(_ element: Value, from known: Value?) -> Bool {
        guard let known else { return true }
        if element != known { return true }
        guard let now = try? SyncedKeys.body(of: element), let before = try? SyncedKeys.body(of: known) else { return false }
        return !JSONValue.identical(.object(now), .object(before))
    }
}
