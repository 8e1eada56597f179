import TandemCore

/// The ordered queue of writes not yet acknowledged, as a pure value: no I/O, so the same rules
/// hold for the in-memory outbox and the durable one, which stores this value's changes in the
/// same transaction as the cached view.
///
/// Writes get increasing sequence numbers and are sent in order. A new write to the same document
/// as the newest, never-sent entry is merged into it when that keeps its meaning (an update after
/// an update or a set, a merge after a merge; a delete supersedes), keeping the older entry's id
/// and place, so sequence numbers stay in queue order and order across documents is kept.
///
/// A `LocalCollectionPersistence` of your own starts a new space with an empty outbox, and rebuilds a
/// saved one from its entries:
///
/// ```swift
/// func create(clientID: String) throws -> LocalCollectionState {
///     LocalCollectionState(outbox: Outbox(clientID: clientID))
/// }
///
/// let outbox = Outbox(clientID: clientID, entries: savedEntries, nextSequence: savedNextSequence)
/// outbox.first?.id        // the oldest write: the next to send
/// ```
public struct Outbox: Sendable, Hashable, Codable {
    /// This outbox's client id: the first half of every `MutationID` it issues.
    public let clientID: String
    /// The writes, oldest first. A slice, so that taking the oldest off (every acknowledgement)
    /// costs nothing however long the queue is.
    public private(set) var entries: ArraySlice<PendingWrite>
    /// The sequence number the next new write gets.
    public private(set) var nextSequence: UInt64

    /// An outbox issuing ids under `clientID`, holding `entries` (oldest first). `nextSequence` is
    /// raised past the highest sequence among the entries when it is not already, so that no
    /// number is given twice.
    public init(clientID: String, entries: [PendingWrite] = [], nextSequence: UInt64 = 1) {
        self.clientID = clientID
        self.entries = entries[...]
        self.nextSequence = max(nextSequence, (entries.map(\.id.sequence).max() ?? 0) + 1)
    }

    /// What `enqueue` did.
    package enum Enqueued: Sendable, Hashable {
        /// A new entry was appended.
        case appended(PendingWrite)
        /// The write was folded into the newest entry, which now reads as given.
        case merged(into: PendingWrite)

        /// The entry that carries the write: its id is the one to await.
        package var entry: PendingWrite {
            switch self {
            case .appended(let entry), .merged(let entry): return entry
            }
        }
    }

    /// Whether no write is waiting.
    public var isEmpty: Bool { entries.isEmpty }
    /// The number of writes waiting.
    public var count: Int { entries.count }

    /// The oldest write: the next to send.
    public var first: PendingWrite? { entries.first }

    /// The writes to one document, oldest first.
    public func entries(for path: DocumentPath) -> [PendingWrite] {
        entries.filter { $0.path == path }
    }

    /// Adds a write, merging it into the newest entry when that keeps its meaning.
    @discardableResult
    package mutating func enqueue(_ mutation: Mutation) -> Enqueued {
        // A batch's writes never merge with another write: that would make it part of the batch.
        if let last = entries.last, last.attempts == 0, last.batch == nil, last.path == mutation.path,
           let merged = Self.merge(last.mutation, then: mutation)
        {
            let lastIndex = entries.index(before: entries.endIndex)
            entries[lastIndex].mutation = merged.identified(by: last.id)
            return .merged(into: entries[lastIndex])
        }
        let entry = PendingWrite(id: MutationID(clientID: clientID, sequence: nextSequence), mutation: mutation)
        nextSequence += 1
        entries.append(entry)
        return .appended(entry)
    }

    /// Adds the writes of an atomic batch, each with its own id, consecutive and tagged with the
    /// first one's sequence; nothing merges into or out of them.
    package mutating func enqueue(batch mutations: [Mutation]) -> [PendingWrite] {
        let first = nextSequence
        var added: [PendingWrite] = []
        added.reserveCapacity(mutations.count)
        for mutation in mutations {
            let entry = PendingWrite(id: MutationID(clientID: clientID, sequence: nextSequence), mutation: mutation, batch: first)
            nextSequence += 1
            entries.append(entry)
            added.append(entry)
        }
        return added
    }

    /// The writes of the request that starts at `index`: the entry alone, or its whole batch.
    package func request(startingAt index: Int) -> ArraySlice<PendingWrite> {
        guard index < entries.endIndex else { return [] }
        guard let batch = entries[index].batch else { return entries[index...index] }
        var end = index + 1
        while end < entries.endIndex && entries[end].batch == batch { end += 1 }
        return entries[index..<end]
    }

    /// Records that an entry was sent (so it is never merged again).
    package mutating func markAttempted(_ id: MutationID) {
        guard let index = entries.firstIndex(where: { $0.id == id }) else { return }
        entries[index].attempts += 1
    }

    /// Records that the first `count` entries were sent.
    package mutating func markAttempted(first count: Int) {
        for index in entries.startIndex..<min(entries.endIndex, entries.startIndex + count) {
            entries[index].attempts += 1
        }
    }

    /// Records that every entry may have been sent: entries loaded from disk, which an earlier run
    /// may have sent just before it stopped. None of them is merged with a later write.
    package mutating func markAllAttempted() {
        for index in entries.indices where entries[index].attempts == 0 {
            entries[index].attempts = 1
        }
    }

    /// Removes an entry, on acknowledgement or on rejection for good.
    @discardableResult
    package mutating func remove(_ id: MutationID) -> PendingWrite? {
        guard let index = entries.firstIndex(where: { $0.id == id }) else { return nil }
        if index == entries.startIndex { return entries.removeFirst() }
        return entries.remove(at: index)
    }

    /// Removes every entry.
    package mutating func removeAll() {
        entries.removeAll()
    }

    private enum CodingKeys: String, CodingKey {
        case clientID, entries, nextSequence
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            clientID: try container.decode(String.self, forKey: .clientID),
            entries: try container.decode([PendingWrite].self, forKey: .entries),
            nextSequence: try container.decode(UInt64.self, forKey: .nextSequence))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(clientID, forKey: .clientID)
        try container.encode(Array(entries), forKey: .entries)
        try container.encode(nextSequence, forKey: .nextSequence)
    }

    /// One write standing for `first` followed by `second` on the same document, or nil when no
    /// single write means the same.
    static func merge(_ first: Mutation, then second: Mutation) -> Mutation? {
        guard first.path == second.path, first.precondition == nil, second.precondition == nil else { return nil }
        // A later transform takes its base from the document as the first write leaves it; merged,
        // it would read the document from before. Keep such writes apart.
        guard second.transforms.isEmpty || second.kind == .delete else { return nil }
        var merged: Mutation
        switch (first.kind, second.kind) {
        case (_, .delete):
            return Mutation.delete(first.path)
        case (.set, .set), (.merge, .set), (.update, .set):
            merged = second
            // The first write's transforms are replaced along with everything else.
        case (.set(var data), .update(let values)):
            guard !overlaps(values.map(\.field), first.transforms.map(\.field)) else { return nil }
            for value in values { data.setValue(value.value, at: value.field) }
            merged = first
            merged.kind = .set(data)
        case (.update(let earlier), .update(let later)):
            let laterFields = later.map(\.field)
            guard !overlaps(laterFields, first.transforms.map(\.field)) else { return nil }
            let kept = earlier.filter { old in !laterFields.contains { $0.isPrefix(of: old.field) || old.field.isPrefix(of: $0) } }
            merged = first
            merged.kind = .update(kept + later)
        case (.merge(let earlier, nil), .merge(let later, nil)):
            guard !first.transforms.contains(where: { later.keys.contains($0.field.segments[0]) }) else { return nil }
            var data = earlier
            Mutation.deepMerge(later, into: &data)
            merged = first
            merged.kind = .merge(data, fields: nil)
        default:
            return nil
        }
        return (try? merged.validate()) == nil ? nil : merged
    }

    private static func overlaps(_ a: [FieldPath], _ b: [FieldPath]) -> Bool {
        a.contains { x in b.contains { y in x.isPrefix(of: y) || y.isPrefix(of: x) } }
    }
}
