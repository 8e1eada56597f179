import TandemCore

/// A write waiting for the server's acknowledgement, in the outbox.
public struct PendingWrite: Sendable, Hashable, Codable {
    /// The id the server applies it under, at most once.
    public var id: MutationID
    /// The write itself, carrying `id` as its mutation id.
    public var mutation: Mutation
    /// How many times it has been sent. A write that was ever sent is never merged with a later one:
    /// the server may already have applied it under its id.
    public var attempts: Int
    /// The sequence of the first write of the atomic batch this write belongs to, or nil for a
    /// write of its own. A batch's writes are consecutive in the outbox, sent as one request, and
    /// applied or refused together.
    public var batch: UInt64?

    /// A pending write with this id; the mutation is given `id` as its own. By default it was never
    /// sent and belongs to no batch.
    public init(id: MutationID, mutation: Mutation, attempts: Int = 0, batch: UInt64? = nil) {
        self.id = id
        self.mutation = mutation.identified(by: id)
        self.attempts = attempts
        self.batch = batch
    }

    /// The document it writes.
    public var path: DocumentPath { mutation.path }
}
