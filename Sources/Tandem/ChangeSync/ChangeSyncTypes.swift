import TandemCore

/// A record deleted on the server, as a fetch reports it.
public struct RecordDeletion: Sendable, Hashable {
    public let recordID: String
    /// The record's type, when this engine knew it ("" otherwise).
    public let recordType: String

    public init(recordID: String, recordType: String) {
        self.recordID = recordID
        self.recordType = recordType
    }
}

/// A record the server saved, with the mutation that saved it.
public struct SentRecord: Sendable, Hashable {
    /// The record as saved; its metadata carries the server's new version: store it with the record.
    public let record: SyncedRecord
    public let mutationID: MutationID
}

/// A record the server deleted, with the mutation that deleted it.
public struct SentDeletion: Sendable, Hashable {
    public let recordID: String
    public let recordType: String
    public let mutationID: MutationID
}

/// A record whose change (or fetch) failed, and why. Nothing was changed in the app's store: the
/// app decides what to do.
public struct FailedRecord: Sendable {
    public let recordID: String
    /// The mutation of a failed send (nil for a fetch).
    public let mutationID: MutationID?
    /// A `TandemError` from the server, or a ``RecordEncryptionError``.
    public let error: any Error
}

/// What the server answered for one batch of changes: every record of it, saved, deleted, in
/// conflict or failed, each with its mutation id.
public struct SendResults: Sendable {
    /// The batch's id, carried by every result of it.
    public let batch: Int
    public let saved: [SentRecord]
    public let deleted: [SentDeletion]
    /// Refused because the record changed on the server: resolved, and the chosen record queued
    /// again in front of the rest.
    public let conflicts: [RecordConflict]
    public let failed: [FailedRecord]
}

/// Everything a ``ChangeSyncEngine`` tells its delegate, as a stream (``ChangeSyncEngine/events()``).
public enum ChangeSyncEvent: Sendable {
    /// Another user signed in (nil: signed out): the engine runs that account's queue and token.
    case accountChanged(String?)
    /// The engine halted with this error; ``ChangeSyncEngine/start()`` resumes it.
    case stopped(any Error)
    /// Everything up to this token was fetched (nil: the token expired; fetching from the start).
    case tokenUpdated(ChangeToken?)
    case fetchedModifications([SyncedRecord])
    case fetchedDeletions([RecordDeletion])
    /// Records fetched that could not be read (a sealed property with a missing or wrong key).
    case fetchFailed([FailedRecord])
    case sent(SendResults)
    /// A whole batch failed for good (its records stay queued when the engine halted).
    case sendFailed(batch: Int, [FailedRecord])
    /// A conflict, and the record it was resolved to.
    case conflictResolved(RecordConflict, SyncedRecord)
}

/// The seed's callbacks: implement those you need (each has an empty default).
///
/// Calls come one at a time, in the order of the engine's operations, on the engine's task.
public protocol ChangeSyncEngineDelegate: AnyObject, Sendable {
    func syncEngine(_ engine: ChangeSyncEngine, didChangeAccount account: String?)
    func syncEngine(_ engine: ChangeSyncEngine, didStopWithError error: any Error)
    /// Store `token` (or the engine's ``ChangeSyncEngine/state``) with the data fetched so far.
    func syncEngine(_ engine: ChangeSyncEngine, didUpdateChangeToken token: ChangeToken?)
    /// Store these records' metadata with them.
    func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord])
    func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion])
    func syncEngine(_ engine: ChangeSyncEngine, fetchDidFailFor failures: [FailedRecord])
    /// Store the saved records' new metadata with them.
    func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int)
    func syncEngine(_ engine: ChangeSyncEngine, didSendDeletions deletions: [SentDeletion], batch: Int)
    func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int)
    /// The record a conflict ends with, or nil to leave it unresolved (the engine halts). Without
    /// an override, the engine's configured resolver decides.
    func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord?
}

extension ChangeSyncEngineDelegate {
    public func syncEngine(_ engine: ChangeSyncEngine, didChangeAccount account: String?) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didStopWithError error: any Error) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didUpdateChangeToken token: ChangeToken?) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {}
    public func syncEngine(_ engine: ChangeSyncEngine, fetchDidFailFor failures: [FailedRecord]) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didSendDeletions deletions: [SentDeletion], batch: Int) {}
    public func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int) {}
    public func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord? {
        engine.configuration.resolver.resolve(conflict)
    }
}
