import Foundation
import Observation
import Synchronization
import TandemCore

/// Keeps every collection with one name in sync (all `reviews` under any product), read-only, with
/// a durable local cache. Documents are identified by their full path, so equal ids under different
/// parents never collide.
///
/// ```swift
/// let reviews = CollectionGroupSyncEngine<Review>(remote: remote, managerKey: "reviews")
/// await reviews.startListening { $0.whereField("rating", isGreaterThan: 3) }
/// reviews.currentCollection
/// ```
public final class CollectionGroupSyncEngine<T: SyncModel>: SyncEngineBase<T>, @unchecked Sendable {
    let remote: any RemoteCollectionGroupService
    /// The observed key path, made once: a key path into a generic type is built anew at each
    /// use, which cost more than the read it guards.
    @usableFromInline let keys = ObservedKeys()

    @usableFromInline
    struct ObservedKeys: @unchecked Sendable {
        @usableFromInline let currentCollection: KeyPath<CollectionGroupSyncEngine<T>, [T]> = \.currentCollection
    }

    /// - Parameters:
    ///   - remote: the server side.
    ///   - managerKey: names this engine's cache and analytics events.
    ///   - enableLocalPersistence: keep the cache in SQLite across launches (default).
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (``ChangeDelivery``).
    public convenience init(remote: any RemoteCollectionGroupService, managerKey: String, enableLocalPersistence: Bool = true, logger: (any DataSyncLogger)? = nil, changeDelivery: ChangeDelivery = .automatic) {
        let opened = Self.openSQLite(managerKey: managerKey, enabled: enableLocalPersistence)
        self.init(remote: remote, managerKey: managerKey, persistence: opened.persistence, logger: logger, changeDelivery: changeDelivery)
        logOpenFailure(opened.error)
    }

    /// The designated initializer. The cache loads here, before any network call.
    public init(
        remote: any RemoteCollectionGroupService, managerKey: String, persistence: (any LocalCollectionPersistence)?,
        logger: (any DataSyncLogger)? = nil, clock: any Clock<Duration> = ContinuousClock(), retryPolicy: RetryPolicy = .default,
        random: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator(), changeDelivery: ChangeDelivery = .automatic
    ) {
        self.remote = remote
        // Read-only (no writes): nothing queued is ever sent from here.
        super.init(
            remote: remote, writes: nil, managerKey: managerKey, persistence: persistence.map { EnginePersistence.collection($0) } ?? .memory,
            logger: logger, clock: clock, retryPolicy: retryPolicy, random: random, changeDelivery: changeDelivery)
    }

    override func documentsDidChange() {
        withMutation(keyPath: keys.currentCollection) {}
    }

    /// Loads the group's matching documents, then streams changes. The same query again does nothing;
    /// a different one restarts the listener. Returns after the first batch, or at once with the cache
    /// if the server cannot be reached.
    public func startListening(buildQuery: (Query) -> Query = { $0 }) async {
        let remote = self.remote
        await core.listen(to: buildQuery(Query())) { query, resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }

    /// Stops the listener; with `clearCaches` (the default) the cache is dropped from memory and disk.
    /// Returns at once: the listener stops and the cache is dropped on the engine's own executor,
    /// after every call made before this one (a `startListening` still on its way included) and
    /// before any made after it.
    public func stopListening(clearCaches: Bool = true) {
        core.stopListening(clearCaches: clearCaches)
    }

    /// The listened query's answer over the group's cache: its filters, order, cursors and limit.
    /// Before any query is listened to, every cached document ordered by full path.
    @inlinable
    public var currentCollection: [T] {
        access(keyPath: keys.currentCollection)
        return core.shown
    }

    /// The same as `currentCollection`.
    public func getCollection() -> [T] { currentCollection }

    /// The documents of `currentCollection` passing a predicate, in its order.
    public func getDocuments(where predicate: (T) -> Bool) -> [T] { currentCollection.filter(predicate) }

    /// What ``currentCollection`` shows, each model with its document's full path as its identity:
    /// two documents with the same id under different parents are two elements (`ForEach`,
    /// `IdentifiedArray`), where the models' own ids would collide.
    public var currentDocuments: [GroupDocument<T>] {
        access(keyPath: keys.currentCollection)
        return core.shownDocuments.map { GroupDocument(path: $0.path, model: $0.model) }
    }

    /// The documents matching a query across the group, always from the server.
    public func getDocumentsAsync(buildQuery: (Query) -> Query) async throws -> [T] {
        let remote = self.remote
        return try await core.fetch(buildQuery(Query())) { try await remote.getDocuments(query: $0) }
    }

    /// What ``currentCollection`` shows, with its changes and metadata, after each change: see
    /// ``CollectionSyncEngine/snapshots()``.
    public func snapshots() -> SnapshotSequence<CollectionSnapshot<T>> {
        core.viewSnapshots()
    }

    /// The query's documents across the group, in query order, after every change. A listener of
    /// its own, started when the sequence is iterated.
    public func streamCollection(buildQuery: (Query) -> Query = { $0 }) -> SyncStream<[T]> {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.serverSnapshots(query: query) { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }

    /// Documents added or changed, and ids removed, across the group. One listener of their own,
    /// started when either sequence is iterated and stopped when neither is.
    public func streamCollectionUpdates(buildQuery: (Query) -> Query = { $0 }) -> (updates: SyncStream<T>, deletions: SyncStream<String>) {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.updatesAndDeletions { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }
}

/// A document of a collection group, identified by its full path.
public struct GroupDocument<T: SyncModel>: Identifiable, Sendable {
    /// The document's full path, such as `products/lamp/reviews/r1`: its identity.
    public let path: DocumentPath
    /// The document, decoded.
    public let model: T
    public var id: DocumentPath { path }
}

extension GroupDocument: Equatable where T: Equatable {}
extension GroupDocument: Hashable where T: Hashable {}
