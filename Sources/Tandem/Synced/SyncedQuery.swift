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
public final class SyncedQuery<Value: DocumentIdentifiable>: SyncedHandle<Value>, @unchecked Sendable {
    /// The engine underneath (memory only by default: a query is a view, it has nothing to send).
    let engine: CollectionSyncEngine<SyncedRow>
    private let query: Mutex<Query>

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
        let query = build(Query())
        self.query = Mutex(query)
        let key = managerKey ?? "synced-query-\(collectionPath() ?? "none")"
        engine = CollectionSyncEngine<SyncedRow>(remote: remote, managerKey: key, persistence: persistence, logger: logger)
        super.init(store: SyncedStore(core: engine.core, collectionPath: { try remote.collectionPath() }, order: query),
                   changeDelivery: changeDelivery, animation: animated)
        store.follow(remote) { [weak self] in
            guard let self else { return nil }
            let query = self.query.withLock { $0 }
            await self.engine.startListening { _ in query }
            return nil
        }
    }

    /// A query of a collection on a ``TandemClient``'s server.
    public convenience init(collectionPath: String, client: TandemClient, query build: (Query) -> Query = { $0 }) {
        self.init(collectionPath: { collectionPath }, remote: TandemRemoteCollectionService(client: client, collectionPath: { collectionPath }), query: build)
    }

    override func valueDidChange() {
        registrar.withMutation(of: self, keyPath: \.value) {}
    }

    /// The query's answer, in its order.
    public var value: IdentifiedArrayOf<Value> {
        registrar.access(self, keyPath: \.value)
        return store.value
    }

    /// Swaps the live query for another (built from an empty one) and returns once its first
    /// answer is in: the old listener goes, the value follows the new query.
    public func load(_ build: (Query) -> Query) async {
        let query = build(Query())
        self.query.withLock { $0 = query }
        store.setOrder(query)
        await load()
    }
}
