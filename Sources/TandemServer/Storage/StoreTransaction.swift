import Foundation
import TandemCore

/// The few operations ``CommitPlanner`` needs from a store, inside one of its write transactions.
///
/// A store opens a transaction, hands it to the planner for each request of a commit, and commits
/// it (or, if any operation threw, rolls everything back and fails every request with
/// `unavailable`). Reads must see what the same transaction wrote before.
///
/// ```swift
/// var transaction = MyTransaction(connection)
/// var version = lastVersion
/// for request in requests {
///     let result = try planner.decide(request, in: &transaction, version: version.next, committed: version)
///     if case .success(let answer) = result, answer.batch != nil { version = version.next }
///     results.append(result)
/// }
/// try connection.commit()
/// ```
public protocol StoreTransaction {
    /// The live document at `path` (nil when there is none, or only a tombstone).
    mutating func document(at path: DocumentPath) throws -> Document?

    /// The highest sequence of `clientID` that has a record, or nil when none has.
    mutating func highestRecordedSequence(of clientID: String) throws -> UInt64?

    /// The record of a decided mutation, or nil when there is none (never decided, or pruned).
    mutating func record(of id: MutationID) throws -> MutationRecord?

    /// The highest sequence of `clientID` whose record pruning removed, or nil when none was.
    mutating func prunedSequence(of clientID: String) throws -> UInt64?

    /// The connection client that owns the writer id `clientID` (the client that first wrote
    /// under it), or nil when none does yet.
    mutating func owner(of clientID: String) throws -> String?

    /// Makes `owner` the owner of the writer id `clientID`, for good.
    mutating func claim(_ clientID: String, for owner: String) throws

    /// Stores a document's new state (nil: a tombstone) at `version`. `encodedData` is its data as
    /// compact JSON text; `writer` the mutation that wrote it last, if it carried an id.
    mutating func write(_ document: Document?, at path: DocumentPath, version: Version, time: Date, encodedData: String?, writer: MutationID?) throws

    /// Records the decision about `id`. Called after the request's writes: a record whose document
    /// is the row `id` just wrote may name that row instead of copying it, as long as the store
    /// copies it into the record before a later write replaces the row.
    mutating func record(_ record: MutationRecord, for id: MutationID) throws

    /// Called once for a request that applied writes: a store that derives its newest version from
    /// its rows must persist `version` here when the request changed no document.
    mutating func applied(version: Version, changedDocuments: Bool) throws
}

extension StoreTransaction {
    public mutating func applied(version: Version, changedDocuments: Bool) throws {}
}

/// What a store keeps about a decided mutation: its answer and the digest of its content.
public struct MutationRecord: Sendable, Hashable {
    /// The answer first given: status `applied` or `refused`.
    public var acknowledgement: WriteAcknowledgement
    /// The `Mutation.contentDigest` of the mutation decided; nil in records kept from before
    /// digests were stored (they are taken on trust).
    public var digest: UInt64?
    /// When it was decided, for pruning.
    public var time: Date

    /// A record of a decision: its answer, the mutation's digest, and when it was made.
    public init(acknowledgement: WriteAcknowledgement, digest: UInt64?, time: Date) {
        self.acknowledgement = acknowledgement
        self.digest = digest
        self.time = time
    }
}
