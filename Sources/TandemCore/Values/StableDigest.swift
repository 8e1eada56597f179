/// A 64-bit digest that is the same in every process and every Tandem version, unlike `Hasher`,
/// which is seeded afresh in each process. Stores keep it beside a mutation's answer to recognise
/// an id reused for another write, so its algorithm must never change.
///
/// Bytes go through FNV-1a; the members of an object (and other unordered collections) are
/// digested one by one and combined by a sum of their mixed digests, so their order never matters.
package struct StableDigest: Sendable {
    package private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    package init() {}

    package mutating func byte(_ byte: UInt8) {
        value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
    }

    package mutating func uint64(_ number: UInt64) {
        var rest = number
        for _ in 0..<8 {
            byte(UInt8(truncatingIfNeeded: rest))
            rest >>= 8
        }
    }

    /// A string's UTF-8 bytes and a terminator no UTF-8 text contains.
    package mutating func string(_ text: String) {
        for unit in text.utf8 { byte(unit) }
        byte(0xFF)
    }

    package mutating func value(_ json: JSONValue) {
        switch json {
        case .null: byte(0)
        case .bool(let flag): byte(flag ? 2 : 1)
        case .int(let number):
            byte(3)
            uint64(UInt64(bitPattern: Int64(number)))
        case .double(let number):
            byte(4)
            uint64(number.bitPattern)
        case .string(let text):
            byte(5)
            string(text)
        case .array(let elements):
            byte(6)
            uint64(UInt64(elements.count))
            for element in elements { value(element) }
        case .object(let object):
            byte(7)
            unordered(object) { digest, member in
                digest.string(member.key)
                digest.value(member.value)
            }
        }
    }

    /// Digests each element on its own and adds in their sum and count, so the order of the
    /// elements does not change the result.
    package mutating func unordered<Elements: Collection>(_ elements: Elements, _ digestElement: (inout StableDigest, Elements.Element) -> Void) {
        var sum: UInt64 = 0
        for element in elements {
            var digest = StableDigest()
            digestElement(&digest, element)
            sum &+= Self.mix(digest.value)
        }
        uint64(UInt64(elements.count))
        uint64(sum)
    }

    /// A bijective scramble of 64 bits (SplitMix64's finalizer), so sums of digests stay spread.
    static func mix(_ input: UInt64) -> UInt64 {
        var bits = input
        bits = (bits ^ (bits >> 30)) &* 0xbf58_476d_1ce4_e5b9
        bits = (bits ^ (bits >> 27)) &* 0x94d0_49bb_1331_11eb
        return bits ^ (bits >> 31)
    }
}
