/// The writes of one ``IdentityMap/transaction(_:)``: observers see all of them as one change.
/// Use it only inside the transaction's closure; it is not `Sendable`, so it cannot leave the task.
///
/// ```swift
/// try map.transaction { tx in
///     try tx.store(alice, stamp: 2)
///     try tx.store(bob, stamp: 2)
///     tx.update(Team.self, id: "t1") { $0.name = "Analytical" }
/// }
/// ```
public struct IdentityMapTransaction {
    @usableFromInline let storage: IdentityMapStorage

    /// Stores an entity; see ``IdentityMap/store(_:stamp:)``. Nothing holds it once the transaction
    /// ends unless an observer, alias or aggregate does.
    public mutating func store<T: Identifiable & Sendable>(_ entity: T, stamp: Stamp? = nil) throws(IdentityMapError)
    where T.ID: Sendable {
        try storage.upsert(entity, stamp: stamp, strict: true)
    }

    /// Stores an entity and points an alias at it.
    public mutating func store<T: Identifiable & Sendable>(_ entity: T, aliased name: String, stamp: Stamp? = nil) throws(IdentityMapError)
    where T.ID: Sendable {
        let node = try storage.upsert(entity, stamp: stamp, strict: true)
        storage.setAlias(NodeKey(alias: T.self, name: name), to: [node.key])
    }

    /// Stores a list and points an alias at it; every stamp is checked before any entity is stored,
    /// and an entity the list names twice is stored once, with its last value.
    public mutating func store<T: Identifiable & Sendable>(_ entities: [T], aliased name: String, stamp: Stamp? = nil) throws(IdentityMapError)
    where T.ID: Sendable {
        for entity in try storage.checkedBatch(entities, stamp: stamp) {
            try storage.upsert(entity, stamp: stamp, checked: true)
        }
        storage.setAlias(NodeKey(alias: [T].self, name: name), to: entities.map { NodeKey(entity: T.self, id: $0.id) })
    }

    /// Changes a stored entity; false when it is not in the map.
    @inlinable @discardableResult
    public mutating func update<T: Identifiable & Sendable>(_ type: T.Type, id: T.ID, _ change: (inout T) -> Void) -> Bool
    where T.ID: Sendable {
        storage.update(NodeKey(entity: T.self, id: id), as: T.self, change)
    }

    /// The current value of an entity, or nil.
    public func value<T: Identifiable & Sendable>(of type: T.Type, id: T.ID) -> T? where T.ID: Sendable {
        storage.value(of: NodeKey(entity: T.self, id: id), as: T.self)
    }

    /// Unsets an alias of a single entity.
    public mutating func removeAlias<T: Identifiable>(_ type: T.Type, named name: String) {
        storage.removeAlias(NodeKey(alias: T.self, name: name))
    }

    /// Unsets an alias of a list.
    public mutating func removeAlias<T: Identifiable>(_ type: [T].Type, named name: String) {
        storage.removeAlias(NodeKey(alias: [T].self, name: name))
    }
}

@available(*, unavailable)
extension IdentityMapTransaction: Sendable {}
