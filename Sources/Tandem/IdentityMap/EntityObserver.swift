/// A handle on one stored entity: its latest value, and a sequence of its changes. While the handle
/// (or an iteration of ``values``) lives, the entity stays in the map.
public final class EntityObserver<T: Identifiable & Sendable>: Sendable where T.ID: Sendable {
    let map: IdentityMap
    let key: NodeKey
    let hold: ObserverCount

    /// Takes over one hold on `key` that the caller already counted in `hold`.
    init(map: IdentityMap, key: NodeKey, hold: ObserverCount) {
        self.map = map
        self.key = key
        self.hold = hold
    }

    deinit {
        // Only the last hold takes the map's lock.
        if hold.decrement() { map.releaseIfUnheld(key) }
    }

    /// The entity's id.
    public var id: T.ID { key.base as! T.ID }

    /// The latest value.
    public var value: T {
        // The hold keeps the node, and a stored entity's value is never removed, only replaced.
        map.read { $0.value(of: key, as: T.self) }!
    }

    /// The current value at once, then one value per transaction that changes the entity
    /// (directly, or through a nested entity if it is an aggregate).
    public var values: EntityObservation<T> {
        let key = self.key
        return EntityObservation(map: map, keys: [key]) { storage in
            storage.value(of: key, as: T.self)
        }
    }
}

/// A handle on an alias: the value it points at (nil while unset) and a sequence of its changes.
/// An alias holds its entities strongly until it is removed, whether or not anyone observes it.
public final class AliasObserver<Value: Sendable>: Sendable {
    let map: IdentityMap
    let key: NodeKey
    let read: @Sendable (IdentityMapStorage, NodeKey) -> Value?

    init(map: IdentityMap, key: NodeKey, read: @escaping @Sendable (IdentityMapStorage, NodeKey) -> Value?) {
        self.map = map
        self.key = key
        self.read = read
    }

    /// The alias's name.
    public var name: String { key.string }

    /// The aliased value, or nil when the alias is not set.
    public var value: Value? {
        map.read { read($0, key) }
    }

    /// The current value (nil while unset) at once, then one value per transaction that changes it.
    public var values: EntityObservation<Value?> {
        let key = self.key
        let read = self.read
        return EntityObservation(map: map, keys: [key]) { storage in
            .some(read(storage, key))
        }
    }
}
