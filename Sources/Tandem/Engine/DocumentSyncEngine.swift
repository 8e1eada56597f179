import Foundation
import Observation
import Synchronization
import TandemCore

/// Keeps one document in sync (a profile, settings), with a durable local copy and an outbox of
/// pending writes replayed until each is acknowledged exactly once.
///
/// ```swift
/// let engine = DocumentSyncEngine<UserModel>(remote: remote, managerKey: "user")
/// try await engine.startListening(documentId: "user_123")
/// engine.currentDocument                                   // cached, pending writes included
/// try await engine.updateDocument(data: ["name": "Ada"])   // the listened document
/// ```
///
/// Switching to another id keeps the previous document's pending writes: they are still sent.
@Observable
public final class DocumentSyncEngine<T: SyncModel>: Sendable {
    @ObservationIgnored package let core: SyncCore<T>
    @ObservationIgnored let remote: any RemoteDocumentService
    /// The observed key paths, made once: a key path into a generic type is built anew at each
    /// use, which cost more than the read it guards.
    @ObservationIgnored private let keys = ObservedKeys()

    private struct ObservedKeys: @unchecked Sendable {
        let currentDocument: KeyPath<DocumentSyncEngine<T>, T?> = \.currentDocument
        let pendingWrites: KeyPath<DocumentSyncEngine<T>, [PendingWrite]> = \.pendingWrites
        let rejectedWrites: KeyPath<DocumentSyncEngine<T>, [RejectedWrite]> = \.rejectedWrites
        let isFromCache: KeyPath<DocumentSyncEngine<T>, Bool> = \.isFromCache
    }

    /// - Parameters:
    ///   - remote: the server side.
    ///   - managerKey: names this engine's saved state and analytics events.
    ///   - enableLocalPersistence: keep the document, its id and the outbox in a file across launches
    ///     (default); when false they live in memory only.
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (``ChangeDelivery``).
    public convenience init(remote: any RemoteDocumentService, managerKey: String, enableLocalPersistence: Bool = true, logger: (any DataSyncLogger)? = nil, changeDelivery: ChangeDelivery = .automatic) {
        self.init(remote: remote, managerKey: managerKey,
                  persistence: enableLocalPersistence ? FileDocumentPersistence(managerKey: managerKey) : nil, logger: logger,
                  changeDelivery: changeDelivery)
    }

    /// The designated initializer. The saved document, its id and the outbox load here, before any
    /// network call.
    public init(
        remote: any RemoteDocumentService, managerKey: String, persistence: (any LocalDocumentPersistence)?,
        logger: (any DataSyncLogger)? = nil, clock: any Clock<Duration> = ContinuousClock(), retryPolicy: RetryPolicy = .default,
        random: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator(), changeDelivery: ChangeDelivery = .automatic
    ) {
        self.remote = remote
        let base = persistence.map { EnginePersistence.document($0) } ?? .memory
        let (space, loadError) = base.openLastSpace(managerKey: managerKey) { SyncCore<T>.newClientID(managerKey) }
        let relay = ChangeRelay()
        core = SyncCore(
            managerKey: managerKey, logger: logger, clock: clock, retryPolicy: retryPolicy, random: random,
            persistence: base, space: space,
            commit: { [remote] in await remote.commit(requests: $0) },
            refetch: { [remote] path in
                guard try remote.collectionPath() == path.parent else {
                    throw TandemError(.failedPrecondition, "\(path) is no longer in the remote's collection; it is read again when listened to.")
                }
                return try await remote.getDocument(id: path.id)
            },
            metrics: remote.metrics,
            didChange: { relay.fire($0) }
        )
        core.bindConnection(of: remote)
        relay.set(changeDelivery) { [weak self] in self?.coreDidChange($0) }
        if let loadError {
            core.log("persistence_fail", ["error_description": "\(loadError)"], severity: .severe)
        }
        core.checkCachedCollection(space.state.documents.map(\.path.parent), against: try? remote.collectionPath())
    }

    /// An engine that goes stops what it started, whether or not `stopListening()` was called: its
    /// listener leaves the server, and no retry of its listener or of its sender stays asleep. A
    /// window of writes in flight still records its answers; writes not yet sent stay queued on
    /// disk, for the next engine with this `managerKey`.
    deinit {
        core.shutdown()
    }

    /// Tells observers of each property the change touched, on the engine's executor after the change.
    private func coreDidChange(_ changes: EngineChanges) {
        if changes.contains(.documents) { withMutation(keyPath: keys.currentDocument) {} }
        if changes.contains(.pendingWrites) { withMutation(keyPath: keys.pendingWrites) {} }
        if changes.contains(.rejectedWrites) { withMutation(keyPath: keys.rejectedWrites) {} }
        if changes.contains(.isFromCache) { withMutation(keyPath: keys.isFromCache) {} }
    }

    // MARK: Listening

    /// Follows a document: its state, then each change. Listening to another id replaces the
    /// listener and the cached document, and keeps every pending write. Returns after the first
    /// state arrives, or at once with the cache if the server cannot be reached.
    public func startListening(documentId: String) async throws {
        _ = try remote.collectionPath().document(documentId)  // a valid path now, or a typed error
        let remote = self.remote
        await core.follow(documentID: documentId) { resumeFrom in remote.listen(documentID: documentId, resumeFrom: resumeFrom) }
        core.triggerFlush()
    }

    /// Stops the listener. With `clearCaches` (the default) the cached document and its id are
    /// dropped from memory and disk; pending writes are kept and still sent. Returns at once: the
    /// listener stops and the cache is dropped on the engine's own executor, after every call made
    /// before this one (a `startListening` still on its way included) and before any made after it.
    public func stopListening(clearCaches: Bool = true) {
        core.stopFollowing(clearCaches: clearCaches)
    }

    // MARK: Reading

    /// The listened document as cached, pending writes included; nil when none.
    public var currentDocument: T? {
        access(keyPath: keys.currentDocument)
        // One snapshot for the id and its model: a switch to another document never tears the read.
        let snapshot = core.snapshot
        guard let id = snapshot.documentID else { return nil }
        return cached(id, in: snapshot)
    }

    private func cached(_ id: String, in snapshot: EngineSnapshot<T>) -> T? {
        if let path = try? remote.collectionPath().document(id) { return snapshot.model(at: path) }
        return snapshot.shownDocuments.first { PathRules.sameBytes($0.path.id, id) }?.model
    }

    /// ``currentDocument`` with its metadata: the state when iterated, then one snapshot after
    /// each change of the document (a local write, an acknowledgement, a server change), of its
    /// metadata, or of the id listened to. No listener of its own: it follows the engine's. A
    /// reader slower than the changes gets the latest state. It ends when the engine goes.
    ///
    /// ```swift
    /// for try await snapshot in engine.snapshots() {
    ///     show(snapshot.document, saving: snapshot.metadata.hasPendingWrites)
    /// }
    /// ```
    public func snapshots() -> SnapshotSequence<DocumentSnapshot<T>> {
        let remote = self.remote
        return core.documentSnapshots { id in try? remote.collectionPath().document(id) }
    }

    /// The same as ``currentDocument``.
    public func getDocument() -> T? { currentDocument }

    /// The listened document, or `not-found`.
    public func getDocumentOrThrow() throws -> T {
        guard let document = currentDocument else {
            throw TandemError(.notFound, "No document is cached for \(core.managerKey); call startListening(documentId:) first or fetch it with getDocumentAsync(id:).")
        }
        return document
    }

    /// The id of the listened document (kept across launches), or `failed-precondition`.
    public func getDocumentId() throws -> String {
        guard let id = core.documentID else {
            throw TandemError(.failedPrecondition, "\(core.managerKey) follows no document; call startListening(documentId:) first.")
        }
        return id
    }

    /// Whether the document has writes not yet acknowledged, and whether it came from the cache.
    public func metadata(id: String? = nil) -> DocumentMetadata {
        access(keyPath: keys.pendingWrites)
        access(keyPath: keys.isFromCache)
        guard let id = id ?? core.documentID, let path = try? remote.collectionPath().document(id) else {
            return DocumentMetadata(hasPendingWrites: false, isFromCache: true)
        }
        return core.metadata(at: path)
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
    /// Writes the server refused for good, rolled back from the document.
    public var rejectedWrites: [RejectedWrite] {
        access(keyPath: keys.rejectedWrites)
        return core.rejectedWrites
    }

    /// Forgets one rejected write the app has dealt with: it leaves ``rejectedWrites``.
    public func dismissRejectedWrite(_ write: RejectedWrite) { core.dismissRejected(write) }

    /// Forgets every rejected write: ``rejectedWrites`` is empty after.
    public func clearRejectedWrites() { core.dismissRejected(nil) }

    /// True until the server's first state of the document arrives in this session.
    public var isFromCache: Bool {
        access(keyPath: keys.isFromCache)
        return core.isFromCache
    }

    /// A document (default: the listened one) from the cache or the server.
    public func getDocumentAsync(id: String? = nil, behavior: FetchBehavior = .cachedOrFetch) async throws -> T? {
        core.retryNowIfDown()
        let id = try id ?? getDocumentId()
        if behavior == .cachedOrFetch, let cached = cached(id, in: core.snapshot) { return cached }
        let remote = self.remote
        return try await core.fetchDocument(id: id) { try await remote.getDocument(id: $0) }
    }

    // MARK: Writing

    /// Saves (replaces) a document; it shows at once if it is the listened one.
    public func saveDocument(_ model: T) async throws {
        core.retryNowIfDown()
        let path = try remote.collectionPath().document(model.id)
        try await core.write(.set(path, try JSONValueEncoder().encodeObject(model)), event: "save", parameters: model.eventParameters)
    }

    /// Updates fields (dotted paths, transforms allowed) of a document, by default the listened one.
    public func updateDocument(id: String? = nil, data: [String: FieldUpdate]) async throws {
        core.retryNowIfDown()
        let path = try remote.collectionPath().document(try id ?? getDocumentId())
        try await core.write(try FieldUpdate.mutation(path, data), event: "update")
    }

    /// Deletes a document, by default the listened one.
    public func deleteDocument(id: String? = nil) async throws {
        core.retryNowIfDown()
        let path = try remote.collectionPath().document(try id ?? getDocumentId())
        try await core.write(.delete(path), event: "delete")
    }
}
