/// The identity of a node of the map: an entity (type + id) or an alias (stored type + name).
///
/// `@unchecked Sendable`: `id` is an `AnyHashable` made only from ids whose type every entry point
/// constrains to `Sendable` (entity ids) or from a `String` (alias names); `type` is an `ObjectIdentifier`.
struct NodeKey: Hashable, @unchecked Sendable, CustomStringConvertible {
    let type: ObjectIdentifier
    let id: AnyHashable
    let isAlias: Bool

    init<T: Identifiable>(entity type: T.Type, id: T.ID) where T.ID: Sendable {
        self.type = ObjectIdentifier(type)
        self.id = AnyHashable(id)
        self.isAlias = false
    }

    init<Value>(alias type: Value.Type, name: String) {
        self.type = ObjectIdentifier(type)
        self.id = AnyHashable(name)
        self.isAlias = true
    }

    static func == (lhs: NodeKey, rhs: NodeKey) -> Bool {
        lhs.type == rhs.type && lhs.isAlias == rhs.isAlias && lhs.id == rhs.id
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(type)
        hasher.combine(isAlias)
        hasher.combine(id)
    }

    var description: String { isAlias ? "alias '\(id)'" : "entity \(id)" }
}

/// One entry of the map's graph.
final class Node {
    /// The entity's value (aggregates hold their recomposed value); nil for aliases and for
    /// entities observed before they are stored.
    var value: Any?
    var stamp: Stamp?
    /// For aggregates: puts the current nested entities into a value.
    var recompose: ((Any, IdentityMapStorage) -> Any)?
    /// Aggregates: the nested entities. Aliases: the aliased entities, in order.
    var children: [NodeKey] = []
    /// Who contains this node, with multiplicity.
    var parents: [NodeKey: Int] = [:]
    /// Observers, handles and subscriptions holding the node.
    var observers = 0
    /// For aliases: whether the alias is set.
    var aliasActive = false

    var isRetained: Bool { observers > 0 || aliasActive || !parents.isEmpty }
}
