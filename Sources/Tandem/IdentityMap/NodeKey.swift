import Synchronization

/// The identity of a node of the map: an entity (type + id) or an alias (stored type + name).
///
/// String ids, the common case, are held as a `String`; any other id is held in a `HashableID` box.
/// Both copy with plain reference counting, which keeps dictionary lookups cheap.
///
/// `@unchecked Sendable`: `other` holds only ids whose type every entry point constrains to
/// `Sendable`; `string` and `type` are Sendable.
@usableFromInline
struct NodeKey: Hashable, @unchecked Sendable, CustomStringConvertible {
    @usableFromInline let type: ObjectIdentifier
    @usableFromInline let string: String
    @usableFromInline let other: HashableID?
    @usableFromInline let isAlias: Bool

    @inlinable
    init<T: Identifiable>(entity type: T.Type, id: T.ID) where T.ID: Sendable {
        self.type = ObjectIdentifier(type)
        if T.ID.self == String.self {
            // A metatype comparison and a same-type bit cast: cheaper than a dynamic `as?` cast
            // when this generic code runs unspecialized.
            self.string = unsafeBitCast(id, to: String.self)
            self.other = nil
        } else {
            self.string = ""
            self.other = HashableID(AnyHashable(id))
        }
        self.isAlias = false
    }

    init<Value>(alias type: Value.Type, name: String) {
        self.type = ObjectIdentifier(type)
        self.string = name
        self.other = nil
        self.isAlias = true
    }

    /// The id (or alias name) as it was given.
    var base: Any { other?.value.base ?? string }

    @usableFromInline var description: String { isAlias ? "alias '\(string)'" : "entity \(base)" }
}

/// A non-string id, boxed so that keys copy with one reference count.
@usableFromInline
final class HashableID: Hashable {
    @usableFromInline let value: AnyHashable

    @usableFromInline init(_ value: AnyHashable) { self.value = value }

    @usableFromInline static func == (lhs: HashableID, rhs: HashableID) -> Bool { lhs.value == rhs.value }
    @usableFromInline func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

/// A stored value, kept in a class so updates mutate it in place instead of re-boxing an `Any`.
@usableFromInline
class AnyEntityBox {
    /// The stored value's type, so a read can check it with one comparison instead of a dynamic cast.
    @usableFromInline let valueType: ObjectIdentifier
    @usableFromInline init(valueType: ObjectIdentifier) { self.valueType = valueType }
}

@usableFromInline
final class EntityBox<T>: AnyEntityBox {
    @usableFromInline var value: T
    @usableFromInline init(_ value: T) {
        self.value = value
        super.init(valueType: ObjectIdentifier(T.self))
    }
}

/// How many observers hold a node. Atomic so a dropped handle that is not the last one lets go
/// without taking the map's lock; the last one takes the lock to release the node.
final class ObserverCount: Sendable {
    let value = Atomic<Int>(0)

    var isZero: Bool { value.load(ordering: .acquiring) == 0 }
    func increment() { value.wrappingAdd(1, ordering: .acquiringAndReleasing) }
    /// Returns true when this was the last hold.
    func decrement() -> Bool { value.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 }
}

/// One entry of the map's graph.
@usableFromInline
final class Node {
    let key: NodeKey
    /// The entity's value (aggregates hold their recomposed value); nil for aliases and for
    /// entities observed before they are stored.
    @usableFromInline var box: AnyEntityBox?
    var stamp: Stamp?
    /// Whether the stored type is an ``Aggregate``; nil until a value is stored.
    @usableFromInline var isAggregate: Bool?
    /// For aggregates: puts the current nested entities into the stored value, in place.
    var recompose: ((AnyEntityBox, IdentityMapStorage) -> Void)?
    /// Aggregates: the nested entities. Aliases: the aliased entities, in order.
    var children: [NodeKey] = []
    /// Who contains this node, with multiplicity.
    var parents: [NodeKey: Int] = [:]
    /// Observers, handles and subscriptions holding the node.
    let observers = ObserverCount()
    /// For aliases: whether the alias is set.
    var aliasActive = false
    /// The subscriptions watching this node.
    var subscriberIDs: [Int] = []
    /// The number of the last transaction that changed this node.
    var changedInTransaction = -1

    init(key: NodeKey) {
        self.key = key
    }

    var isRetained: Bool { !observers.isZero || aliasActive || !parents.isEmpty }

    @inlinable
    func value<T>(as type: T.Type) -> T? {
        typedBox(T.self)?.value
    }

    /// The box, if it holds a `T`.
    @inlinable
    func typedBox<T>(_ type: T.Type) -> EntityBox<T>? {
        guard let box, box.valueType == ObjectIdentifier(T.self) else { return nil }
        // Safe: a box whose valueType is T is always an EntityBox<T> (see EntityBox.init).
        return unsafeDowncast(box, to: EntityBox<T>.self)
    }
}
