import Foundation
import Observation
import Synchronization
import TandemCore

/// Keeps a collection in sync: a bulk load, then streamed changes, with a durable local cache and an
/// outbox of pending writes that is replayed until the server acknowledges each write exactly once.
///
/// ```swift
/// let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products")
/// await engine.startListening { $0.whereField("price", isLessThan: 100) }
/// engine.currentCollection                    // the cached view, pending writes included
/// try await engine.saveDocument(lamp)         // shows at once; sent in order; retried if offline
/// try await engine.updateDocument(id: "lamp", data: ["stock": .increment(-1)])
/// ```
///
/// `@Observable`: views reading `currentCollection` (or any state property) update when it changes.
/// Changes are announced on the main actor on platforms with SwiftUI, and on the thread that made
/// them elsewhere (`changeDelivery: .automatic`, the default; see ``ChangeDelivery``). Every method is safe from the main actor
/// and from any task.
public final class CollectionSyncEngine<T: SyncModel>: WritingSyncEngineBase<T>, @unchecked Sendable {
    let remote: any RemoteCollectionService
    /// The observed key path, made once: a key path into a generic type is built anew at each
    /// use, which cost more than the read it guards.
    @usableFromInline let keys = ObservedKeys()

    @usableFromInline
    struct ObservedKeys: @unchecked Sendable {
        @usableFromInline let currentCollection: KeyPath<CollectionSyncEngine<T>, [T]> = \.currentCollection
    }

    /// - Parameters:
    ///   - remote: the server side.
    ///   - managerKey: names this engine's cache, outbox and analytics events.
    ///   - enableLocalPersistence: keep the cache and outbox in SQLite across launches (default); when
    ///     false they live in memory only.
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (``ChangeDelivery``).
    public convenience init(remote: any RemoteCollectionService, managerKey: String, enableLocalPersistence: Bool = true, logger: (any DataSyncLogger)? = nil, changeDelivery: ChangeDelivery = .automatic) {
        let opened = Self.openSQLite(managerKey: managerKey, enabled: enableLocalPersistence)
        self.init(remote: remote, managerKey: managerKey, persistence: opened.persistence, logger: logger, changeDelivery: changeDelivery)
        logOpenFailure(opened.error)
    }

    /// The designated initializer: any persistence (nil for memory only), clock, retry policy, and
    /// the generator the retries' jitter is drawn from.
    /// The cache and the outbox are loaded here, before any network call.
    public init(
        remote: any RemoteCollectionService, managerKey: String, persistence: (any LocalCollectionPersistence)?,
        logger: (any DataSyncLogger)? = nil, clock: any Clock<Duration> = ContinuousClock(), retryPolicy: RetryPolicy = .default,
        random: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator(), changeDelivery: ChangeDelivery = .automatic
    ) {
        self.remote = remote
        super.init(
            remote: remote,
            writes: Writes(collectionPath: { try remote.collectionPath() }, getDocument: { try await remote.getDocument(id: $0) },
                           commit: { await remote.commit(requests: $0) }),
            managerKey: managerKey, persistence: persistence.map { EnginePersistence.collection($0) } ?? .memory,
            logger: logger, clock: clock, retryPolicy: retryPolicy, random: random, changeDelivery: changeDelivery)
    }

    override func documentsDidChange() {
        withMutation(keyPath: keys.currentCollection) {}
    }

    // MARK: Listening

    /// Loads the query's documents, then streams changes. The same query again does nothing; a
    /// different one replaces the listener. Returns after the first batch is applied, or at once with
    /// the cache if the server cannot be reached (retries continue in the background).
    public func startListening(buildQuery: (Query) -> Query = { $0 }) async {
        let remote = self.remote
        await core.listen(to: buildQuery(Query())) { query, resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }

    /// Stops the listener. With `clearCaches` (the default) the cached documents are dropped from
    /// memory and disk; pending writes are kept and still sent.
    ///
    /// Returns at once, whatever the engine is writing to disk (safe from `.onDisappear`): the
    /// listener stops and the cache is dropped on the engine's own executor, after every call made
    /// before this one (a `startListening` still on its way included) and before any made after
    /// it; observers see `currentCollection` empty then.
    public func stopListening(clearCaches: Bool = true) {
        core.stopListening(clearCaches: clearCaches)
    }

    // MARK: Reading

    /// The listened query's answer over the cache with pending writes applied: its filters,
    /// order, cursors and limit, as the server would answer once every write is acknowledged. A
    /// local write shows at once where the query puts it, and leaves the view when it no longer
    /// matches. Before any query is listened to, every cached document in path order.
    @inlinable
    public var currentCollection: [T] {
        access(keyPath: keys.currentCollection)
        return core.shown
    }

    /// The same as ``currentCollection``.
    public func getCollection() -> [T] { currentCollection }

    /// The document with this id in ``currentCollection``, or nil.
    public func getDocument(id: String) -> T? {
        access(keyPath: keys.currentCollection)
        guard let path = try? remote.collectionPath().document(id) else {
            return core.shownModels { PathRules.sameBytes($0.id, id) }.first
        }
        return core.shownModel(at: path)
    }

    /// The cached documents passing a predicate.
    public func getDocuments(where predicate: (T) -> Bool) -> [T] {
        currentCollection.filter(predicate)
    }

    /// Whether a document has writes not yet acknowledged, and whether it came from the cache.
    public func metadata(id: String) -> DocumentMetadata {
        observedMetadata(at: try? remote.collectionPath().document(id))
    }

    /// The collection from the cache when listening (or holding data), else fetched.
    public func getCollectionAsync(behavior: FetchBehavior = .cachedOrFetch) async throws -> [T] {
        core.retryNowIfDown()
        if behavior == .cachedOrFetch, core.isListening || !core.shown.isEmpty { return currentCollection }
        core.log("getCollection_start")
        do {
            let documents = try await remote.getDocuments(query: core.query ?? Query())
            let models = documents.compactMap(core.decode)
            core.log("getCollection_success", ["count": models.count])
            return models
        } catch {
            core.log("getCollection_fail", ["error_description": "\(error)"], severity: .severe)
            throw error
        }
    }

    /// One document from the cache (with `.cachedOrFetch`, when present) or the server.
    public func getDocumentAsync(id: String, behavior: FetchBehavior = .cachedOrFetch) async throws -> T? {
        core.retryNowIfDown()
        if behavior == .cachedOrFetch, let cached = getDocument(id: id) { return cached }
        let remote = self.remote
        return try await core.fetchDocument(id: id) { try await remote.getDocument(id: $0) }
    }

    /// The documents passing a predicate, from the cache or fetched.
    public func getDocumentsAsync(where predicate: (T) -> Bool) async throws -> [T] {
        try await getCollectionAsync().filter(predicate)
    }

    /// The documents matching a query, always from the server.
    public func getDocumentsAsync(buildQuery: (Query) -> Query) async throws -> [T] {
        let remote = self.remote
        return try await core.fetch(buildQuery(Query())) { try await remote.getDocuments(query: $0) }
    }

    // MARK: Writing

    /// Saves (replaces) a document. It shows in ``currentCollection`` at once and is sent in order.
    /// Returns once acknowledged or durably queued; throws when the server refuses it for good.
    public func saveDocument(_ model: T) async throws {
        let path = try remote.collectionPath().document(model.id)
        try await core.write(.set(path, try JSONValueEncoder().encodeObject(model)), event: "save", parameters: model.eventParameters)
    }

    /// Updates fields (dotted paths) of a document, with transforms such as `.increment(1)`.
    public func updateDocument(id: String, data: [String: FieldUpdate]) async throws {
        let path = try remote.collectionPath().document(id)
        try await core.write(try FieldUpdate.mutation(path, data), event: "update")
    }

    /// Writes several documents atomically: the writes show at once, are queued durably as one
    /// batch, and are sent as one request that the server applies whole or not at all. Returns
    /// once acknowledged or durably queued; throws when the server refuses the batch for good (every
    /// write of it is then rolled back), or before writing anything when a write cannot be made.
    /// At most 500 writes, the server's limit.
    public func commit(_ build: (inout WriteBatch<T>) throws -> Void) async throws {
        var batch = WriteBatch<T>(collection: try remote.collectionPath())
        try build(&batch)
        if let failure = batch.failure { throw failure }
        try await core.writeBatch(batch.mutations)
    }

    /// Deletes a document.
    public func deleteDocument(id: String) async throws {
        let path = try remote.collectionPath().document(id)
        try await core.write(.delete(path), event: "delete")
    }
}

/// Where an engine tells observers of its properties (`withObservationTracking`, SwiftUI) that
/// they changed.
public enum ChangeDelivery: Sendable, Hashable {
    /// On the main actor where an app's main actor always runs (platforms with SwiftUI), as a UI
    /// expects; on the thread that made the change elsewhere (Linux, where a server or a tool may
    /// never run its main actor, and a notice waiting for it would never come). The default.
    case automatic
    /// On the thread that made the change: the engine's executor, which makes every change of its
    /// state (the caller's thread for a dismissal of a rejected write). Reads made after the
    /// notice see the change.
    case immediate
    /// On the main actor, in the order the changes were made, for UI code that must only touch
    /// its state there. Needs a main actor that runs (an app's main run loop, `dispatchMain()`,
    /// or an `async` main); the properties already hold the new values when the notice comes.
    case mainActor
}

extension ChangeDelivery {
    /// Runs a notice where this delivery says: now, or on the main actor in the order given.
    func deliver(_ notice: @escaping @Sendable () -> Void) {
        if resolved == .mainActor {
            MainActorQueue.shared.enqueue(notice)
        } else {
            notice()
        }
    }

    /// What ``automatic`` means on this platform.
    var resolved: ChangeDelivery {
        guard self == .automatic else { return self }
        #if canImport(SwiftUI)
        return .mainActor
        #else
        return .immediate
        #endif
    }
}

/// Forwards the core's change signal to the engine, which exists only after the core does.
///
/// The handler sits in a class box: a closure kept directly in a `Mutex` is re-wrapped in a
/// reabstraction thunk on every `withLock` (inout) access, so each call got slower than the last.
final class ChangeRelay: Sendable {
    private final class Handler: Sendable {
        let call: @Sendable (EngineChanges) -> Void
        let delivery: ChangeDelivery
        init(_ delivery: ChangeDelivery, _ call: @escaping @Sendable (EngineChanges) -> Void) {
            self.delivery = delivery
            self.call = call
        }
    }

    private let handler = Mutex<Handler?>(nil)
    func set(_ delivery: ChangeDelivery = .immediate, _ handler: @escaping @Sendable (EngineChanges) -> Void) {
        self.handler.withLock { $0 = Handler(delivery, handler) }
    }

    func fire(_ changes: EngineChanges) {
        guard let handler = handler.withLock({ $0 }) else { return }
        switch handler.delivery.resolved {
        case .immediate, .automatic:
            handler.call(changes)
        case .mainActor:
            MainActorQueue.shared.enqueue { handler.call(changes) }
        }
    }
}

/// Runs notices on the main actor one after another, in the order they were enqueued: separate
/// `Task { @MainActor in … }`s made from different threads could run out of order.
final class MainActorQueue: Sendable {
    static let shared = MainActorQueue()

    private struct State {
        var waiting: [@Sendable () -> Void] = []
        var draining = false
    }

    private let state = Mutex(State())

    func enqueue(_ notice: @escaping @Sendable () -> Void) {
        let start = state.withLock { state -> Bool in
            state.waiting.append(notice)
            defer { state.draining = true }
            return !state.draining
        }
        if start { Task { @MainActor in self.drain() } }
    }

    @MainActor
    private func drain() {
        while true {
            let batch = state.withLock { state -> [@Sendable () -> Void] in
                defer { state.waiting = [] }
                if state.waiting.isEmpty { state.draining = false }
                return state.waiting
            }
            if batch.isEmpty { return }
            batch.forEach { $0() }
        }
    }
}
