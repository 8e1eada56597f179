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
public final class DocumentSyncEngine<T: SyncModel>: WritingSyncEngineBase<T>, @unchecked Sendable {
    let remote: any RemoteDocumentService
    /// The observed key path, made once: a key path into a generic type is built anew at each
    /// use, which cost more than the read it guards.
    private let keys = ObservedKeys()

    private struct ObservedKeys: @unchecked Sendable {
        let currentDocument: KeyPath<DocumentSyncEngine<T>, T?> = \.currentDocument
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
        super.init(
            remote: remote,
            writes: Writes(collectionPath: { try remote.collectionPath() }, getDocument: { try await remote.getDocument(id: $0) },
                           commit: { await remote.commit(requests: $0) }),
            managerKey: managerKey, persistence: persistence.map { EnginePersistence.document($0) } ?? .memory,
            logger: logger, clock: clock, retryPolicy: retryPolicy, random: random, changeDelivery: changeDelivery)
    }

    override func documentsDidChange() {
        withMutation(keyPath: keys.currentDocument) {}
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
        observedMetadata(at: (id ?? core.documentID).flatMap { try? remote.collectionPath().document($0) })
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
        let path = try remote.collectionPath().document(model.id)
        try await core.write(.set(path, try JSONValueEncoder().encodeObject(model)), event: "save", parameters: model.eventParameters)
    }

    /// Updates fields (dotted paths, transforms allowed) of a document, by default the listened one.
    public func updateDocument(id: String? = nil, data: [String: FieldUpdate]) async throws {
        let path = try remote.collectionPath().document(try id ?? getDocumentId())
        try await core.write(try FieldUpdate.mutation(path, data), event: "update")
    }

    /// Deletes a document, by default the listened one.
    public func deleteDocument(id: String? = nil) async throws {
        let path = try remote.collectionPath().document(try id ?? getDocumentId())
        try await core.write(.delete(path), event: "delete")
    }
}
