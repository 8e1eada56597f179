import Foundation
import Observation
import TandemCore

/// What the three engines share: the core that owns their cache and listener, the way observers
/// hear of its changes, its start (the cache loaded before any network call) and its end (whatever
/// it started stops with it), and ``isFromCache``. An app uses ``CollectionSyncEngine``,
/// ``DocumentSyncEngine`` or ``CollectionGroupSyncEngine``; it never makes or subclasses this one.
public class SyncEngineBase<T: SyncModel>: @unchecked Sendable, RegistrarObservable {
    // Safe to mark unchecked: every stored property, here and in the final subclasses, is a
    // constant of a Sendable type (the registrar is one); a non-final class cannot say so checked.
    @usableFromInline package let core: SyncCore<T>
    /// Observable by hand (``RegistrarObservable``), so the hot reads can be `@inlinable`.
    @usableFromInline let registrar = ObservationRegistrar()
    /// The observed key path, made once: a key path into a generic type is built anew at each
    /// use, which cost more than the read it guards.
    private let isFromCacheKey: KeyPath<SyncEngineBase<T>, Bool> = \.isFromCache

    /// How an engine that writes reaches its collection on the server.
    struct Writes: Sendable {
        let collectionPath: @Sendable () throws -> CollectionPath
        let getDocument: @Sendable (String) async throws -> Document?
        let commit: @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
    }

    /// Opens the engine's last space from `persistence` and starts its core: the cache and the
    /// outbox load here, before any network call. Without `writes` the engine is read-only: its
    /// outbox is left empty, and nothing is ever sent from it.
    init(
        remote: any ReachabilityReporting, writes: Writes?, managerKey: String, persistence: EnginePersistence,
        logger: (any DataSyncLogger)?, clock: any Clock<Duration>, retryPolicy: RetryPolicy,
        random: any RandomNumberGenerator & Sendable, changeDelivery: ChangeDelivery
    ) {
        let (opened, loadError) = persistence.openLastSpace(managerKey: managerKey) { SyncCore<T>.newClientID(managerKey) }
        var space = opened
        if writes == nil {
            space.state.outbox = Outbox(clientID: space.state.outbox.clientID)
        }
        let relay = ChangeRelay()
        let commit: @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
        var refetch: (@Sendable (DocumentPath) async throws -> Document?)?
        if let writes {
            commit = writes.commit
            refetch = { path in
                guard try writes.collectionPath() == path.parent else {
                    throw TandemError(.failedPrecondition, "\(path) is no longer in the remote's collection; it is read again when listened to.")
                }
                return try await writes.getDocument(path.id)
            }
        } else {
            commit = { requests in
                requests.map { _ in .failure(TandemError(.unimplemented, "A collection group is read-only; write through a CollectionSyncEngine.")) }
            }
        }
        core = SyncCore(
            managerKey: managerKey, logger: logger, clock: clock, retryPolicy: retryPolicy, random: random,
            persistence: persistence, space: space, commit: commit, refetch: refetch,
            metrics: writes == nil ? nil : remote.metrics,
            didChange: { relay.fire($0) }
        )
        core.bindConnection(of: remote)
        relay.set(changeDelivery) { [weak self] in self?.coreDidChange($0) }
        if let loadError {
            core.log("persistence_fail", ["error_description": "\(loadError)"], severity: .severe)
        }
        if let writes {
            core.checkCachedCollection(space.state.documents.lazy.map(\.path.parent), against: try? writes.collectionPath())
        }
    }

    /// The SQLite persistence named `managerKey` in the default folder, or nil (memory only) when
    /// not `enabled` or when it cannot be opened: then also why, for ``logOpenFailure(_:)``.
    static func openSQLite(managerKey: String, enabled: Bool) -> (persistence: (any LocalCollectionPersistence)?, error: (any Error)?) {
        guard enabled else { return (nil, nil) }
        do {
            return (try SQLiteCollectionPersistence(managerKey: managerKey), nil)
        } catch {
            return (nil, error)
        }
    }

    /// The engine runs on in memory when its persistence could not be opened; the failure is
    /// said, not swallowed.
    func logOpenFailure(_ error: (any Error)?) {
        if let error {
            core.log("persistence_fail", ["error_description": "\(error)"], severity: .severe)
        }
    }

    /// An engine that goes stops what it started, whether or not `stopListening()` was called: its
    /// listener leaves the server, and no retry of its listener or of its sender stays asleep. A
    /// window of writes in flight still records its answers; writes not yet sent stay queued on
    /// disk, for the next engine with this `managerKey`.
    deinit {
        core.shutdown()
    }

    /// Tells observers of each property the change touched, on the engine's executor after the change.
    func coreDidChange(_ changes: EngineChanges) {
        if changes.contains(.documents) { documentsDidChange() }
        if changes.contains(.isFromCache) { withMutation(keyPath: isFromCacheKey) {} }
    }

    /// Tells observers of the engine's documents (`currentCollection`, `currentDocument`) that they
    /// changed: each engine says which property that is.
    func documentsDidChange() {}

    /// Tells observers that the caller read ``isFromCache``: for reads that depend on it.
    func accessIsFromCache() {
        access(keyPath: isFromCacheKey)
    }

    /// True until the server's first answer to the listener arrives in this session: what the
    /// engine shows comes from its cache until then.
    public var isFromCache: Bool {
        access(keyPath: isFromCacheKey)
        return core.isFromCache
    }
}

/// What the two engines that write share beside ``SyncEngineBase``: the writes waiting for the
/// server and those it refused. An app uses ``CollectionSyncEngine`` or ``DocumentSyncEngine``; it
/// never makes or subclasses this one.
public class WritingSyncEngineBase<T: SyncModel>: SyncEngineBase<T>, @unchecked Sendable {
    /// The observed key paths, made once (see ``SyncEngineBase``).
    private let keys = Keys()

    private struct Keys: @unchecked Sendable {
        let pendingWrites: KeyPath<WritingSyncEngineBase<T>, [PendingWrite]> = \.pendingWrites
        let rejectedWrites: KeyPath<WritingSyncEngineBase<T>, [RejectedWrite]> = \.rejectedWrites
    }

    override func coreDidChange(_ changes: EngineChanges) {
        super.coreDidChange(changes)
        if changes.contains(.pendingWrites) { withMutation(keyPath: keys.pendingWrites) {} }
        if changes.contains(.rejectedWrites) { withMutation(keyPath: keys.rejectedWrites) {} }
    }

    /// Whether any write is waiting for the server. Observed, as every state property is.
    public var hasPendingWrites: Bool {
        access(keyPath: keys.pendingWrites)
        return core.pendingWriteCount > 0
    }

    /// The writes waiting for the server, oldest first.
    public var pendingWrites: [PendingWrite] {
        access(keyPath: keys.pendingWrites)
        return core.pendingWrites
    }

    /// Writes the server refused for good, rolled back from what the engine shows.
    public var rejectedWrites: [RejectedWrite] {
        access(keyPath: keys.rejectedWrites)
        return core.rejectedWrites
    }

    /// Forgets one rejected write the app has dealt with: it leaves ``rejectedWrites``.
    public func dismissRejectedWrite(_ write: RejectedWrite) { core.dismissRejected(write) }

    /// Forgets every rejected write: ``rejectedWrites`` is empty after.
    public func clearRejectedWrites() { core.dismissRejected(nil) }

    /// The metadata of the document at `path` (none: not from the server, no pending write),
    /// observed as both of its properties are.
    func observedMetadata(at path: DocumentPath?) -> DocumentMetadata {
        access(keyPath: keys.pendingWrites)
        accessIsFromCache()
        guard let path else { return DocumentMetadata(hasPendingWrites: false, isFromCache: true) }
        return core.metadata(at: path)
    }
}
