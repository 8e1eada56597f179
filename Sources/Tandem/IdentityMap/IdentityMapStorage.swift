/// The map's graph of entities, aggregates and aliases.
///
/// `@unchecked Sendable`: it is not thread-safe by itself. It is created inside the ``IdentityMap``'s
/// `Mutex`, and every access goes through that mutex's `withLock`; the type is internal, so no
/// other code can reach it. The conformance only lets the mutex lend it to closures that run under
/// the lock (the caller's transaction body, the observers' value builders).
@usableFromInline
final class IdentityMapStorage: @unchecked Sendable {
    struct Subscriber {
        let keys: [NodeKey]
        let deliver: (IdentityMapStorage) -> Void
    }

    @usableFromInline private(set) var nodes: [NodeKey: Node] = [:]
    private var subscribers: [Int: Subscriber] = [:]
    /// Numbers transactions, so a node is listed as changed once per transaction.
    private var transactionNumber = 0
    /// Nodes changed by the transaction under way: their observers hear once when it ends.
    private var changed: [Node] = []
    /// Nodes that may have lost their last holder during the transaction under way.
    private var releaseCandidates: Set<NodeKey> = []

    // MARK: Reading

    func node(_ key: NodeKey) -> Node? { nodes[key] }

    /// The stored value of an entity with the same type and id as `value`.
    func currentValue<T: Identifiable>(of value: T) -> T? where T.ID: Sendable {
        nodes[NodeKey(entity: T.self, id: value.id)]?.value(as: T.self)
    }

    func value<T>(of key: NodeKey, as type: T.Type) -> T? {
        nodes[key]?.value(as: T.self)
    }

    /// An alias's entities, in order; nil when the alias is not set.
    func aliasValues<T>(_ key: NodeKey, as type: T.Type) -> [T]? {
        guard let node = nodes[key], node.aliasActive else { return nil }
        return node.children.compactMap { nodes[$0]?.value(as: T.self) }
    }

    // MARK: Writing

    /// The entities of a batch to store, each id once with its last value (in the order ids first
    /// appear), once every one's stamp is checked against the stored one: a stale stamp throws
    /// before anything is applied. Store them with `checked: true`, so an entity stored earlier in
    /// the same batch (as another's nested entity) does not make a later one stale.
    func checkedBatch<T: Identifiable & Sendable>(_ entities: [T], stamp: Stamp?) throws(IdentityMapError) -> [T] where T.ID: Sendable {
        var last: [T.ID: Int] = [:]
        var order: [T.ID] = []
        for (index, entity) in entities.enumerated() {
            if last.updateValue(index, forKey: entity.id) == nil { order.append(entity.id) }
        }
        let batch = order.map { entities[last[$0]!] }
        if let stamp {
            for entity in batch {
                if let current = nodes[NodeKey(entity: T.self, id: entity.id)]?.stamp, stamp <= current {
                    throw Self.stale(entity, current: current, rejected: stamp)
                }
            }
        }
        return batch
    }

    private static func stale<T: Identifiable>(_ entity: T, current: Stamp, rejected: Stamp) -> IdentityMapError {
        .staleStamp(entity: "\(T.self) '\(entity.id)'", current: current, rejected: rejected)
    }

    /// Stores an entity (and, for an aggregate, its nested entities). A stamp not newer than the
    /// stored one leaves the entity as it is; `strict` makes that an error; `checked` says the
    /// stamp was checked already (``checkedBatch(_:stamp:)``) and applies it whatever is stored.
    @discardableResult
    func upsert<T: Identifiable & Sendable>(_ value: T, stamp: Stamp?, strict: Bool = false, checked: Bool = false) throws(IdentityMapError) -> Node
    where T.ID: Sendable {
        let key = NodeKey(entity: T.self, id: value.id)
        let node = nodeCreating(key)
        if !checked, let stamp, let current = node.stamp, stamp <= current {
            if strict { throw Self.stale(value, current: current, rejected: stamp) }
            return node
        }
        if node.isAggregate == nil {
            node.isAggregate = value is any Aggregate
        }
        // Nested entities first: through a cycle they may store an older copy of this very entity,
        // which the value below then replaces.
        var children: [NodeKey]?
        var aggregate: (any Aggregate)?
        if node.isAggregate == true, let value = value as? any Aggregate {
            aggregate = value
            children = storeChildren(of: value, stamp: stamp)
        }
        if let box = node.typedBox(T.self) {
            box.value = value
        } else {
            node.box = EntityBox(value)
        }
        if let aggregate, let children {
            relink(key, to: children)
            if node.recompose == nil { node.recompose = Self.recomposer(for: aggregate) }
            node.recompose!(node.box!, self)
        }
        if let stamp { node.stamp = stamp }
        didChange(key, node)
        return node
    }

    @usableFromInline
    func upsert<T: Identifiable & Sendable>(_ value: T, stamp: Stamp?) where T.ID: Sendable {
        // Nested entities never fail the aggregate: a stale one keeps the newer stored value.
        _ = try? upsert(value, stamp: stamp, strict: false)
    }

    /// Changes a stored entity in place; false when it is absent.
    @inlinable
    func update<T: Identifiable & Sendable>(_ key: NodeKey, as type: T.Type, _ change: (inout T) -> Void) -> Bool
    where T.ID: Sendable {
        guard let node = nodes[key], let box = node.typedBox(T.self) else { return false }
        if node.isAggregate == true {
            // Its nested entities may have changed too: store it whole.
            var value = box.value
            change(&value)
            upsert(value, stamp: nil)
        } else {
            change(&box.value)
            didChange(key, node)
        }
        return true
    }

    /// Points an alias at entities, keeping it alive until removed.
    func setAlias(_ key: NodeKey, to children: [NodeKey]) {
        let node = nodeCreating(key)
        node.aliasActive = true
        relink(key, to: children)
        didChange(key, node)
    }

    /// Unsets an alias; its observers see nil.
    func removeAlias(_ key: NodeKey) {
        guard let node = nodes[key], node.aliasActive else { return }
        node.aliasActive = false
        relink(key, to: [])
        didChange(key, node)
        releaseCandidates.insert(key)
    }

    func removeAllAliases() {
        for (key, node) in nodes where key.isAlias && node.aliasActive {
            removeAlias(key)
        }
    }

    /// Holds a node (creating an empty one if needed) for an observer.
    @discardableResult
    func retain(_ key: NodeKey) -> ObserverCount {
        retain(nodeCreating(key))
    }

    func retain(_ node: Node) -> ObserverCount {
        node.observers.increment()
        return node.observers
    }

    /// Lets go of one hold on a node.
    func release(_ key: NodeKey) {
        guard let node = nodes[key] else { return }
        if node.observers.decrement() { releaseCandidates.insert(key) }
    }

    /// Releases a node whose last handle already counted itself out, if nothing else holds it.
    func releaseIfUnheld(_ key: NodeKey) {
        releaseCandidates.insert(key)
    }

    // MARK: Observation

    /// Registers a subscriber on nodes (holding them) and delivers the current value at once.
    func subscribe(id: Int, keys: [NodeKey], deliver: @escaping (IdentityMapStorage) -> Void) {
        subscribers[id] = Subscriber(keys: keys, deliver: deliver)
        for key in Set(keys) {
            retain(key)
            nodes[key]!.subscriberIDs.append(id)
        }
        deliver(self)
    }

    /// Removes a subscriber and lets go of its nodes. Returns it so the caller drops it outside the lock.
    func unsubscribe(id: Int) -> Subscriber? {
        guard let subscriber = subscribers.removeValue(forKey: id) else { return nil }
        for key in Set(subscriber.keys) {
            nodes[key]?.subscriberIDs.removeAll { $0 == id }
            release(key)
        }
        return subscriber
    }

    /// Ends a transaction: releases what nobody holds, then tells each affected subscriber once.
    ///
    /// Delivery happens while the map's lock is held, on purpose: a delivery only yields into an
    /// `AsyncStream` continuation, which enqueues and never runs observer code inline, and doing it
    /// under the lock keeps two concurrent transactions' values in commit order for every observer.
    @usableFromInline
    func finishTransaction() {
        if !releaseCandidates.isEmpty { sweep() }
        transactionNumber += 1
        guard !changed.isEmpty else { return }
        if changed.count == 1 {
            // One node: its subscriber ids are already unique.
            for id in changed[0].subscriberIDs {
                subscribers[id]?.deliver(self)
            }
        } else {
            var notified = Set<Int>()
            for node in changed {
                for id in node.subscriberIDs where notified.insert(id).inserted {
                    subscribers[id]?.deliver(self)
                }
            }
        }
        changed.removeAll(keepingCapacity: true)
    }

    // MARK: Graph upkeep

    private func nodeCreating(_ key: NodeKey) -> Node {
        if let node = nodes[key] { return node }
        let node = Node(key: key)
        nodes[key] = node
        releaseCandidates.insert(key)
        return node
    }

    private func markChanged(_ node: Node) {
        // Only observed nodes need to be heard of when the transaction ends.
        if !node.subscriberIDs.isEmpty, node.changedInTransaction != transactionNumber {
            node.changedInTransaction = transactionNumber
            changed.append(node)
        }
    }

    private func storeChildren<A: Aggregate>(of aggregate: A, stamp: Stamp?) -> [NodeKey] {
        var keys: [NodeKey] = []
        var seen = Set<NodeKey>()
        for nested in A.nestedEntities {
            for child in nested.children(aggregate) {
                child.store(self, stamp)
                if seen.insert(child.key).inserted { keys.append(child.key) }
            }
        }
        return keys
    }

    private static func recomposer<A: Aggregate>(for aggregate: A) -> (AnyEntityBox, IdentityMapStorage) -> Void {
        { box, storage in
            guard box.valueType == ObjectIdentifier(A.self) else { return }
            let box = unsafeDowncast(box, to: EntityBox<A>.self)
            for nested in A.nestedEntities {
                nested.recompose(&box.value, storage)
            }
        }
    }

    /// Makes `children` the node's children, fixing their parent links.
    private func relink(_ key: NodeKey, to children: [NodeKey]) {
        guard let node = nodes[key] else { return }
        for old in node.children {
            guard let child = nodes[old] else { continue }
            if let count = child.parents[key], count > 1 {
                child.parents[key] = count - 1
            } else {
                child.parents[key] = nil
            }
            releaseCandidates.insert(old)
        }
        for new in children {
            nodes[new]?.parents[key, default: 0] += 1
        }
        node.children = children
    }

    /// Marks a node changed and brings every aggregate and alias containing it up to date,
    /// children before parents, so each recomposition reads final values.
    @usableFromInline
    func didChange(_ key: NodeKey, _ start: Node) {
        markChanged(start)
        guard !start.parents.isEmpty else { return }
        // Every ancestor, found depth-first.
        var ancestors = Set<NodeKey>()
        var stack = Array(start.parents.keys)
        while let next = stack.popLast() {
            guard ancestors.insert(next).inserted, let node = nodes[next] else { continue }
            stack.append(contentsOf: node.parents.keys)
        }
        // Kahn's order over the ancestors: a node waits for its changed children.
        var waiting: [NodeKey: Int] = [:]
        for ancestor in ancestors {
            waiting[ancestor] = nodes[ancestor]?.children.filter { ancestors.contains($0) }.count ?? 0
        }
        var ready = ancestors.filter { waiting[$0] == 0 }
        var done = Set<NodeKey>()
        while done.count < ancestors.count {
            if ready.isEmpty {
                // A cycle (A contains B contains A): recompose what is left in any order.
                guard let any = ancestors.subtracting(done).first else { break }
                ready.insert(any)
            }
            let next = ready.removeFirst()
            guard done.insert(next).inserted, let node = nodes[next] else { continue }
            if let recompose = node.recompose, let box = node.box {
                recompose(box, self)
            }
            markChanged(node)
            for parent in node.parents.keys where ancestors.contains(parent) && !done.contains(parent) {
                waiting[parent, default: 1] -= 1
                if waiting[parent] == 0 { ready.insert(parent) }
            }
        }
    }

    /// Drops nodes nobody holds, and the links they held.
    private func sweep() {
        while let key = releaseCandidates.popFirst() {
            guard let node = nodes[key], !node.isRetained else { continue }
            nodes[key] = nil
            for child in node.children {
                guard let childNode = nodes[child] else { continue }
                childNode.parents[key] = nil
                releaseCandidates.insert(child)
            }
        }
    }
}
