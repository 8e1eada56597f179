import TandemCore

/// A record deleted on the server, as a fetch reports it.
public struct RecordDeletion: Sendable, Hashable {
    /// The id of the record deleted.
    public let recordID: String
    /// The record's type, when this engine knew it ("" otherwise).
    public let recordType: String

    /// A deletion of record `recordID`, of type `recordType`: what
    /// `ChangeSyncEngine.sendChanges(modify:delete:)` takes to delete records of any types.
    public init(recordID: String, recordType: String) {
        self.recordID = recordID
        self.recordType = recordType
    }
}

/// A record the server saved, with the mutation that saved it.
public struct SentRecord: Sendable, Hashable {
    /// The record as saved; its metadata carries the server's new version: store it with the record.
    public let record: SyncedRecord
    /// The id of the mutation that saved it.
    public let mutationID: MutationID
}

/// A record the server deleted, with the mutation that deleted it.
public struct SentDeletion: Sendable, Hashable {
    /// The id of the record deleted.
    public let recordID: String
    /// The record's type, as the deletion was queued with it.
    public let recordType: String
    /// The id of the mutation that deleted it.
    public let mutationID: MutationID
}

/// A record whose change (or fetch) failed, and why. Nothing was changed in the app's store: the
/// app decides what to do.
public struct FailedRecord: Sendable {
    /// The id of the record that failed.
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
    /// The records the server saved, each with its new version in its metadata.
    public let saved: [SentRecord]
    /// The records the server deleted.
    public let deleted: [SentDeletion]
    /// Refused because the record changed on the server: resolved, and the chosen record queued
    /// again in front of the rest.
    public let conflicts: [RecordConflict]
    /// The changes that failed for good (refused, of an unknown outcome, or of a record the server no
    /// longer has): no longer queued, and the app's to handle.
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
    /// Records created or changed on the server, in lists of at most `maxRecordsPerBatch`.
    case fetchedModifications([SyncedRecord])
    /// Records deleted on the server.
    case fetchedDeletions([RecordDeletion])
    /// Records fetched that could not be read (a sealed property with a missing or wrong key).
    case fetchFailed([FailedRecord])
    /// The server's answer to one batch of changes.
    case sent(SendResults)
    /// Changes of a sent batch that failed for good (refused, or meeting a record the server no
    /// longer has), each with its error; they are no longer queued.
    case sendFailed(batch: Int, [FailedRecord])
    /// A conflict, and the record it was resolved to.
    case conflictResolved(RecordConflict, SyncedRecord)
}

/// The engine's callbacks to the app's store: implement those you need (each has an empty default).
///
/// Calls come one at a time, in the order of the engine's operations, on the engine's task.
public protocol ChangeSyncEngineDelegate: AnyObject, Sendable {
    /// Another user signed in (nil: signed out): the engine now runs that account's queue and token.
    func syncEngine(_ engine: ChangeSyncEngine, didChangeAccount account: String?)
    /// The engine halted with `error`; `ChangeSyncEngine.start()` resumes it.
    func syncEngine(_ engine: ChangeSyncEngine, didStopWithError error: any Error)
    /// Store `token` (or the engine's ``ChangeSyncEngine/state``) with the data fetched so far.
    func syncEngine(_ engine: ChangeSyncEngine, didUpdateChangeToken token: ChangeToken?)
    /// Store these records' metadata with them.
    func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord])
    /// Records deleted on the server: delete them from the app's store.
    func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion])
    /// Records fetched that could not be read (a sealed property with a missing or wrong key). The
    /// token moves past them all the same.
    func syncEngine(_ engine: ChangeSyncEngine, fetchDidFailFor failures: [FailedRecord])
    /// Store the saved records' new metadata with them.
    func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int)
    /// The deletions of batch `batch` the server applied.
    func syncEngine(_ engine: ChangeSyncEngine, didSendDeletions deletions: [SentDeletion], batch: Int)
    /// The changes of batch `batch` that failed for good: no longer queued, and nothing was changed
    /// in the app's store.
    func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int)
    /// The record a conflict ends with, or nil to leave it unresolved (the engine halts). Without
    /// an override, the engine's configured resolver decides.
    func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord?
}

extension ChangeSyncEngineDelegate {
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, didChangeAccount account: String?) {}
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, didStopWithError error: any Error) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didUpdateChangeToken token: ChangeToken?) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {}
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {}
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, fetchDidFailFor failures: [FailedRecord]) {}
    public func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {}
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, didSendDeletions deletions: [SentDeletion], batch: Int) {}
    /// Does nothing by default.
    public func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int) {}
    public func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord? {
        engine.configuration.resolver.resolve(conflict)
    }
}
