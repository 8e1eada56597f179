/// An entity that contains other entities. Storing an aggregate stores each nested entity too, and
/// a later change to a nested entity shows in every aggregate that contains it.
///
/// ```swift
/// struct ProductReviews: Aggregate {
///     var id: String { product.id }
///     var product: Product
///     var featured: Review?
///     var reviews: [Review]
///
///     static var nestedEntities: [NestedEntity<Self>] {
///         [.init(\.product), .init(\.featured), .init(\.reviews)]
///     }
/// }
/// ```
public protocol Aggregate: Identifiable, Sendable where ID: Sendable {
    /// The key paths of the entities this aggregate contains: single, optional, or arrays.
    static var nestedEntities: [NestedEntity<Self>] { get }
}

/// One nested entity (or optional entity, or array of entities) of an ``Aggregate``.
public struct NestedEntity<Root> {
    /// The nested entities as they are in a root value, with a way to store each.
    let children: (Root) -> [ChildEntity]
    /// Replaces the nested entities in a root value by the map's current ones.
    let recompose: (inout Root, IdentityMapStorage) -> Void

    /// A nested entity.
    public init<T: Identifiable & Sendable>(_ keyPath: WritableKeyPath<Root, T>) where T.ID: Sendable {
        children = { root in [ChildEntity(root[keyPath: keyPath])] }
        recompose = { root, storage in
            if let current = storage.currentValue(of: root[keyPath: keyPath]) {
                root[keyPath: keyPath] = current
            }
        }
    }

    /// An optional nested entity.
    public init<T: Identifiable & Sendable>(_ keyPath: WritableKeyPath<Root, T?>) where T.ID: Sendable {
        children = { root in root[keyPath: keyPath].map { [ChildEntity($0)] } ?? [] }
        recompose = { root, storage in
            if let child = root[keyPath: keyPath], let current = storage.currentValue(of: child) {
                root[keyPath: keyPath] = current
            }
        }
    }

    /// An array of nested entities.
    public init<T: Identifiable & Sendable>(_ keyPath: WritableKeyPath<Root, [T]>) where T.ID: Sendable {
        children = { root in root[keyPath: keyPath].map(ChildEntity.init) }
        recompose = { root, storage in
            root[keyPath: keyPath] = root[keyPath: keyPath].map { storage.currentValue(of: $0) ?? $0 }
        }
    }
}

/// A nested entity found in an aggregate: its key, and how to store it.
struct ChildEntity {
    let key: NodeKey
    let store: (IdentityMapStorage, Stamp?) -> Void

    init<T: Identifiable & Sendable>(_ value: T) where T.ID: Sendable {
        key = NodeKey(entity: T.self, id: value.id)
        store = { storage, stamp in storage.upsert(value, stamp: stamp) }
    }
}
