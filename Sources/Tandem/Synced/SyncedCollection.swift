import Foundation
import IdentifiedCollections
import Observation
import Synchronization
import TandemCore
#if canImport(SwiftUI)
import SwiftUI
#endif

/// What a ``SyncedCollection`` holds: which collection, in which order, and what it shows in tests.
public struct CollectionConfiguration<Value: DocumentIdentifiable>: Sendable {
    /// The collection's path, read again each time the handle attaches; nil while there is none (no
    /// user signed in yet): the handle is then not available.
    public var collectionPath: @Sendable () -> String?
    /// The field the value is ordered by, and whether ascending; ties (and no order) go by document id.
    public var orderBy: (field: String, ascending: Bool)?
    /// Filters, cursors and limits beyond the order (`Query()` when nil).
    public var query: Query?
    /// The value shown by previews and tests, which make no connection.
    public var testingValue: [Value]?
    #if canImport(SwiftUI)
    /// Apple platforms: the animation a SwiftUI view shows the value's changes with (delivered on
    /// the main actor, as ``ChangeDelivery/automatic`` does there); nil for none.
    public var animation: Animation?
    #endif

    /// A configuration of the collection at the fixed path `collectionPath`.
    ///
    /// `orderBy` is the field the value is ordered by and whether ascending (`("memo", true)`);
    /// `query` adds filters, cursors and limits; `testingValue` is what previews and tests show.
    public init(collectionPath: String, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil) {
        self.init(collectionPath: { collectionPath }, orderBy: orderBy, query: query, testingValue: testingValue)
    }

    /// A configuration of a collection whose path follows the app's state: `collectionPath` is read
    /// again each time the handle attaches, and returns nil while there is none (nobody signed in).
    ///
    /// ```swift
    /// CollectionConfiguration<Todo>(collectionPath: { session.uid.map { "users/\($0)/todos" } })
    /// ```
    ///
    /// `orderBy`, `query` and `testingValue` are as for a fixed path.
    public init(collectionPath: @escaping @Sendable () -> String?, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil) {
        self.collectionPath = collectionPath
        self.orderBy = orderBy.map { (field: $0.0, ascending: $0.1) }
        self.query = query
        self.testingValue = testingValue
    }

    /// The query the handle listens to: `query`, then ordered by `orderBy`.
    public var listenedQuery: Query {
        var query = self.query ?? Query()
        if let orderBy {
            let field = (try? FieldPath(dotted: orderBy.field)) ?? FieldPath(stringLiteral: orderBy.field)
            query = query.order(by: field, descending: !orderBy.ascending)
        }
        return query
    }
}

/// A collection held as plain state: edit `value` with ``withLock(_:)``, and each edit becomes
/// writes through an engine's durable outbox; the server's changes flow back in.
///
/// ```swift
/// let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)),
///                              client: client)
/// await todos.load()
/// todos.withLock { $0.append(Todo(memo: "Buy milk")) }          // shown at once, sent in order
/// let milk = todos.value[0]
/// todos.withLock { $0[id: milk.clientId]?.completed = true }    // writes `completed` alone
/// todos.withLock { _ = $0.remove(id: milk.clientId) }           // deletes that document
/// ```
///
/// An edit is diffed against the value before it, element by element, by `clientId`, never against
/// a read of the server: a new element gets its `documentId` at once and is
/// created; a changed one is merged, exactly the field paths that changed; a removed one is deleted;
/// a document another client added is never deleted; moving elements writes nothing. The writes of
/// one edit form one atomic batch (an edit of more than 500 writes goes as several, each atomic),
/// queued in the order the edits were made, durable across a restart, sent exactly once.
///
/// The value is the engine's view: the server's documents with every edit not yet acknowledged
/// applied on top, so a change from the server never reverts an edit still on its way; it stays in
/// the configuration's order. An edit the server refuses for good is rolled back, and `lastError`
/// says why.
public final class SyncedCollection<Value: DocumentIdentifiable>: SyncedEditingHandle<Value>, @unchecked Sendable {
    /// The configuration the handle was made with.
    public let configuration: CollectionConfiguration<Value>
    /// The engine underneath: its cache, outbox and listener.
    package let engine: CollectionSyncEngine<SyncedRow>
    /// What this handle shares with others of its configuration: held, so the registry keeps it.
    private let shared: any AnyObject & Sendable

    /// - Parameters:
    ///   - configuration: the collection, its order and its testing value.
    ///   - remote: the server side (``TandemRemoteCollectionService`` or a mock).
    ///   - persistence: where the cache and the outbox are kept (nil: memory only).
    ///   - managerKey: names the engine's cache, outbox and analytics events. Default: from the path
    ///     and query, so handles of other collections never share a cache.
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (``ChangeDelivery``).
    public init(_ configuration: CollectionConfiguration<Value>, remote: any RemoteCollectionService,
                persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil,
                changeDelivery: ChangeDelivery = .automatic) {
        self.configuration = configuration
        let query = configuration.listenedQuery
        let path = configuration.collectionPath()
        let shared = SyncedRegistry.shared.shared(SyncedRegistry.key(remote: remote, kind: "collection", value: Value.self, path: path, query: query)) {
            let key = managerKey ?? "synced-\(path ?? "none")-\(SyncCore<SyncedRow>.digest(of: query))"
            let engine = CollectionSyncEngine<SyncedRow>(remote: remote, managerKey: key, persistence: persistence, logger: logger, changeDelivery: .immediate)
            let store = SyncedStore<Value>(core: engine.core, collectionPath: { try remote.collectionPath() }, order: query,
                                           testingValue: configuration.testingValue)
            // Weakly: the store keeps this closure, and must not keep its engine alive.
            store.follow(remote) { [weak engine] in
                await engine?.startListening { _ in query }
                return nil
            }
            return SyncedShared(engine: engine, store: store)
        }
        engine = shared.engine
        self.shared = shared
        super.init(store: shared.store, changeDelivery: changeDelivery, animation: configuration.synced)
    }

    /// A handle on a ``TandemClient``'s server.
    public convenience init(_ configuration: CollectionConfiguration<Value>, client: TandemClient,
                            persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil) {
        self.init(configuration, remote: TandemRemoteCollectionService(client: client, collectionPath: configuration.collectionPath),
                  persistence: persistence, managerKey: managerKey, logger: logger)
    }

    /// A handle for a reusable request (``KeyCollectionRequest``).
    public convenience init<Request: KeyCollectionRequest>(_ request: Request, client: TandemClient,
                                                           persistence: (any LocalCollectionPersistence)? = nil) where Request.Value == Value {
        self.init(request.configuration, client: client, persistence: persistence)
    }

    override func valueDidChange() {
        registrar.withMutation(of: self, keyPath: \.value) {}
    }

    // MARK: State

    /// The collection: the server's documents with every pending edit applied, in the
    /// configuration's order.
    public var value: IdentifiedArrayOf<Value> {
        registrar.access(self, keyPath: \.value)
        return store.value
    }

    // MARK: Loading and editing

    /// Edits the value: the closure's changes are shown at once and become writes (see the type's
    /// description). Returns what the closure returns. Do not read or edit this handle inside it.
    ///
    /// An edit that cannot be written (no collection now, a value that does not encode, a path the
    /// server would refuse) is not applied: the value stays as it was and `lastError` says why.
    @discardableResult
    public func withLock<Result>(_ edit: (inout IdentifiedArrayOf<Value>) throws -> Result) rethrows -> Result {
        try store.edit(edit)
    }
}
