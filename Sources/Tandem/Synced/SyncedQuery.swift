import Foundation
import IdentifiedCollections
import Observation
import Synchronization
import TandemCore

/// A live, read-only query held as plain state: the documents of a collection that match a query,
/// in its order, decoded into the app's values, updated as the server changes.
///
/// ```swift
/// let open = SyncedQuery<Todo>(collectionPath: "todos", client: client) {
///     $0.whereField("completed", isEqualTo: false).order(by: "memo")
/// }
/// await open.load()
/// await open.load { $0.whereField("completed", isEqualTo: true) }   // swaps the live query
/// ```
///
/// One listener at any time: `load(_:)` with another query replaces it, and the value follows the
/// new query's answer.
public final class SyncedQuery<Value: DocumentIdentifiable>: Observable, Sendable {
    /// The engine underneath (memory only by default: a query is a view, it has nothing to send).
    let engine: CollectionSyncEngine<SyncedRow>
    let store: SyncedStore<Value>
    private let registrar = ObservationRegistrar()
    private let query: Mutex<Query>
    private let listener = Mutex<Int?>(nil)
    private let animated: SyncedAnimation

    /// A live query of `remote`'s collection.
    ///
    /// - Parameters:
    ///   - collectionPath: the collection's path, read once to name the engine (the default
    ///     `managerKey`); the documents are those of `remote`'s collection.
    ///   - remote: the server side (`TandemRemoteCollectionService` or a mock).
    ///   - persistence: where the engine's cache is kept (nil, the default: memory only).
    ///   - managerKey: names the engine's cache and analytics events. Default: from the path.
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (`ChangeDelivery`).
    ///   - build: makes the query from an empty one (by default, every document of the collection).
    public convenience init(collectionPath: @escaping @Sendable () -> String?, remote: any RemoteCollectionService,
                            persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil,
                            changeDelivery: ChangeDelivery = .automatic, query build: (Query) -> Query = { $0 }) {
        self.init(collectionPath: collectionPath, remote: remote, persistence: persistence, managerKey: managerKey, logger: logger,
                  changeDelivery: changeDelivery, animated: .none, query: build)
    }

    init(collectionPath: @escaping @Sendable () -> String?, remote: any RemoteCollectionService, persistence: (any LocalCollectionPersistence)?,
         managerKey: String?, logger: (any DataSyncLogger)?, changeDelivery: ChangeDelivery, animated: SyncedAnimation, query build: (Query) -> Query) {
        self.animated = animated
        let query = build(Query())
        self.query = Mutex(query)
        let key = managerKey ?? "synced-query-\(collectionPath() ?? "none")"
        engine = CollectionSyncEngine<SyncedRow>(remote: remote, managerKey: key, persistence: persistence, logger: logger)
        store = SyncedStore(core: engine.core, collectionPath: { try remote.collectionPath() }, order: query)
        let token = store.addListener { [weak self] changes in
            changeDelivery.deliver { [weak self] in self?.tell(changes) }
        }
        listener.withLock { $0 = token }
        store.follow(remote) { [weak self] in
            guard let self else { return nil }
            let query = self.query.withLock { $0 }
            await self.engine.startListening { _ in query }
            return nil
        }
    }

    deinit {
        if let token = listener.withLock({ $0 }) { store.removeListener(token) }
    }

    /// A query of a collection on a ``TandemClient``'s server.
    public convenience init(collectionPath: String, client: TandemClient, query build: (Query) -> Query = { $0 }) {
        self.init(collectionPath: { collectionPath }, remote: TandemRemoteCollectionService(client: client, collectionPath: { collectionPath }), query: build)
    }

    private func tell(_ changes: SyncedChanges) {
        animated.perform(changes) { [self] in
            if changes.contains(.value) { registrar.withMutation(of: self, keyPath: \.value) {} }
            if changes.contains(.loadError) { registrar.withMutation(of: self, keyPath: \.loadError) {} }
            if changes.contains(.isLoading) { registrar.withMutation(of: self, keyPath: \.isLoading) {} }
        }
    }

    /// The query's answer, in its order.
    public var value: IdentifiedArrayOf<Value> {
        registrar.access(self, keyPath: \.value)
        return store.value
    }

    /// Whether `load()` is waiting for the query's first answer.
    public var isLoading: Bool {
        registrar.access(self, keyPath: \.isLoading)
        return store.isLoading
    }

    /// Why the query could not be attached (no path: nobody signed in), if it could not.
    public var loadError: (any Error)? {
        registrar.access(self, keyPath: \.loadError)
        return store.loadError
    }

    /// Attaches the listener for the current query and returns once its first answer is in.
    public func load() async {
        await store.load()
    }

    /// Swaps the live query for another (built from an empty one) and returns once its first
    /// answer is in: the old listener goes, the value follows the new query.
    public func load(_ build: (Query) -> Query) async {
        let query = build(Query())
        self.query.withLock { $0 = query }
        store.setOrder(query)
        await load()
    }

    /// A signal after each change of the handle's state, for tests that await one.
    package func changeSignals() -> AsyncStream<Void> { store.changeSignals() }
}
