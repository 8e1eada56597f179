import Synchronization

/// One place that holds the latest value of every entity, so every screen and task that asks for
/// the same entity sees the same, newest data.
///
/// Entities are stored by type and id. A value is kept while someone holds it: an
/// ``EntityObserver`` (which `store` and `find` return), an iteration of its `values`, an alias,
/// or an aggregate that contains it. Once nothing holds it, it is released and `find` returns nil.
///
/// ```swift
/// let map = IdentityMap()
/// let user = try map.store(User(id: "ada", name: "Ada"), stamp: 1)
/// Task { for await latest in user.values { print(latest.name) } }
///
/// map.update(User.self, id: "ada") { $0.name = "Ada Lovelace" }   // the loop prints it
/// _ = try map.store(User(id: "ada", name: "Old"), stamp: 0)        // throws: stamp 0 is stale
///
/// let me = try map.store(user.value, aliased: "current_user")      // held until removeAlias
/// ```
///
/// Every method is safe from any thread or task. Closures passed to ``update(_:id:_:)`` and
/// ``transaction(_:)`` run while the map is locked: they must not call the map themselves.
public final class IdentityMap: Sendable {
    @usableFromInline let storage = Mutex(IdentityMapStorage())
    private let subscriberIDs = Atomic<Int>(0)
    /// Told of every entity stored or refused.
    public let logger: (any IdentityMapLogger)?

    /// An empty map. A `logger`, when given, is told of every entity stored or refused, after the
    /// map's lock is released.
    public init(logger: (any IdentityMapLogger)? = nil) {
        self.logger = logger
    }

    /// Reports a `store` call's outcome to the logger, outside the lock.
    private func report<T: Identifiable>(_ entities: [T], _ result: Result<Void, IdentityMapError>) {
        guard let logger else { return }
        switch result {
        case .success:
            for entity in entities { logger.didStore(T.self, id: entity.id) }
        case .failure(let error):
            for entity in entities { logger.didFailedToStore(T.self, id: entity.id, error: error) }
        }
    }

    /// Runs a store, reporting it.
    private func logged<T: Identifiable, R>(_ entities: [T], _ body: () throws(IdentityMapError) -> R) throws(IdentityMapError) -> R {
        do {
            let result = try body()
            report(entities, .success(()))
            return result
        } catch {
            report(entities, .failure(error))
            throw error
        }
    }

    // MARK: Storing

    /// Stores an entity (and, for an ``Aggregate``, every nested entity).
    ///
    /// A stamp equal to or lower than the stored one is refused with ``IdentityMapError/Code/staleStamp``;
    /// a higher one applies and becomes the stored stamp; a nil stamp applies and keeps the stored stamp.
    /// Hold the returned observer to keep the entity in the map: an entity nobody holds is released.
    public func store<T: Identifiable & Sendable>(_ entity: T, stamp: Stamp? = nil) throws(IdentityMapError) -> EntityObserver<T>
    where T.ID: Sendable {
        let node = try logged([entity]) { () throws(IdentityMapError) in
            try write { storage throws(IdentityMapError) in
                let node = try storage.upsert(entity, stamp: stamp, strict: true)
                _ = storage.retain(node)
                return node
            }
        }
        return EntityObserver(map: self, key: node.key, hold: node.observers)
    }

    /// Stores several entities in one transaction: all or nothing. Every stamp is checked before
    /// anything is applied, so a stale one throws with the map unchanged. An id the batch holds
    /// more than once is stored once, with its last value. Returns an observer for each entity
    /// given, in order (repeats observe the same entity).
    public func store<T: Identifiable & Sendable>(entities: [T], stamp: Stamp? = nil) throws(IdentityMapError) -> [EntityObserver<T>]
    where T.ID: Sendable {
        let nodes = try logged(entities) { () throws(IdentityMapError) in
            try write { storage throws(IdentityMapError) in
                var stored: [T.ID: Node] = [:]
                for entity in try storage.checkedBatch(entities, stamp: stamp) {
                    stored[entity.id] = try storage.upsert(entity, stamp: stamp, checked: true)
                }
                let nodes = entities.map { stored[$0.id]! }
                for node in nodes { _ = storage.retain(node) }
                return nodes
            }
        }
        return nodes.map { EntityObserver(map: self, key: $0.key, hold: $0.observers) }
    }

    /// Stores an entity and points an alias at it. Aliased entities are held until the alias is removed.
    /// The same name used for two types makes two aliases.
    @discardableResult  // the alias holds what it names
    public func store<T: Identifiable & Sendable>(_ entity: T, aliased name: String, stamp: Stamp? = nil) throws(IdentityMapError) -> AliasObserver<T>
    where T.ID: Sendable {
        let alias = NodeKey(alias: T.self, name: name)
        try logged([entity]) { () throws(IdentityMapError) in
            try write { storage throws(IdentityMapError) in
                let node = try storage.upsert(entity, stamp: stamp, strict: true)
                storage.setAlias(alias, to: [node.key])
            }
        }
        return find(T.self, aliased: name)
    }

    /// Stores a list of entities and points an alias at the list, in order, all or nothing as
    /// ``store(entities:stamp:)`` does (the list may name an entity twice; it is stored once, with
    /// its last value).
    @discardableResult  // the alias holds what it names
    public func store<T: Identifiable & Sendable>(_ entities: [T], aliased name: String, stamp: Stamp? = nil) throws(IdentityMapError) -> AliasObserver<[T]>
    where T.ID: Sendable {
        let alias = NodeKey(alias: [T].self, name: name)
        try logged(entities) { () throws(IdentityMapError) in
            try write { storage throws(IdentityMapError) in
                for entity in try storage.checkedBatch(entities, stamp: stamp) {
                    try storage.upsert(entity, stamp: stamp, checked: true)
                }
                storage.setAlias(alias, to: entities.map { NodeKey(entity: T.self, id: $0.id) })
            }
        }
        return find([T].self, aliased: name)
    }

    /// Changes a stored entity in place. Returns false, changing nothing, when it is not in the map.
    /// The stamp is kept. The closure runs under the map's lock and must not call the map.
    @inlinable @discardableResult
    public func update<T: Identifiable & Sendable>(_ type: T.Type, id: T.ID, _ change: (inout T) -> Void) -> Bool
    where T.ID: Sendable {
        write { storage in
            storage.update(NodeKey(entity: T.self, id: id), as: T.self, change)
        }
    }

    /// Unsets an alias of a single entity; its observers see nil.
    public func removeAlias<T: Identifiable>(_ type: T.Type, named name: String) {
        write { $0.removeAlias(NodeKey(alias: T.self, name: name)) }
    }

    /// Unsets an alias of a list; its observers see nil.
    public func removeAlias<T: Identifiable>(_ type: [T].Type, named name: String) {
        write { $0.removeAlias(NodeKey(alias: [T].self, name: name)) }
    }

    /// Unsets every alias.
    public func removeAllAliases() {
        write { $0.removeAllAliases() }
    }

    /// Makes several changes that observers see as one: each observer gets one value for the whole
    /// transaction, however many of its entities changed. The closure runs under the map's lock and
    /// must not call the map; use the transaction it is given.
    public func transaction<R>(_ body: (inout IdentityMapTransaction) throws -> R) rethrows -> R {
        try storage.withLock { storage in
            var transaction = IdentityMapTransaction(storage: storage)
            defer { storage.finishTransaction() }
            return try body(&transaction)
        }
    }

    // MARK: Finding

    /// An observer of a stored entity, or nil when it is not in the map.
    public func find<T: Identifiable & Sendable>(_ type: T.Type, id: T.ID) -> EntityObserver<T>? where T.ID: Sendable {
        let key = NodeKey(entity: T.self, id: id)
        let hold = storage.withLock { storage -> ObserverCount? in
            guard let node = storage.node(key), node.value(as: T.self) != nil else { return nil }
            return storage.retain(node)
        }
        return hold.map { EntityObserver(map: self, key: key, hold: $0) }
    }

    /// An observer of the entity an alias points at; its value is nil while the alias is not set.
    public func find<T: Identifiable & Sendable>(_ type: T.Type, aliased name: String) -> AliasObserver<T> where T.ID: Sendable {
        AliasObserver(map: self, key: NodeKey(alias: T.self, name: name)) { storage, key in
            storage.aliasValues(key, as: T.self)?.first
        }
    }

    /// An observer of the list an alias points at; its value is nil while the alias is not set.
    public func find<T: Identifiable & Sendable>(_ type: [T].Type, aliased name: String) -> AliasObserver<[T]> where T.ID: Sendable {
        AliasObserver(map: self, key: NodeKey(alias: [T].self, name: name)) { storage, key in
            storage.aliasValues(key, as: T.self)
        }
    }

    /// The values of several entities, in the order of `ids` (absent ones left out): the current
    /// list at once, then one list per transaction that changes any of them.
    public func values<T: Identifiable & Sendable>(for type: T.Type, ids: [T.ID]) -> EntityObservation<[T]> where T.ID: Sendable {
        let keys = ids.map { NodeKey(entity: T.self, id: $0) }
        return EntityObservation(map: self, keys: keys) { storage in
            keys.compactMap { storage.value(of: $0, as: T.self) }
        }
    }

    // MARK: Internals

    /// Runs one write as its own transaction.
    @inlinable
    func write<R, E: Error>(_ body: (IdentityMapStorage) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = storage.withLock { storage in
            defer { storage.finishTransaction() }
            do throws(E) {
                return .success(try body(storage))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    func read<R>(_ body: (IdentityMapStorage) -> R) -> R {
        storage.withLock { body($0) }
    }

    func makeSubscriberID() -> Int {
        subscriberIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Called by a handle whose hold was the node's last observer.
    func releaseIfUnheld(_ key: NodeKey) {
        write { $0.releaseIfUnheld(key) }
    }

    func subscribe(id: Int, keys: [NodeKey], deliver: @escaping (IdentityMapStorage) -> Void) {
        write { $0.subscribe(id: id, keys: keys, deliver: deliver) }
    }

    func unsubscribe(id: Int) {
        // The removed subscriber (and the continuation it holds) is dropped here, outside the lock.
        let removed = write { $0.unsubscribe(id: id) }
        _ = removed
    }
}
