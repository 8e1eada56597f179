import TandemCore

/// The hub's listeners, kept for the fan-out's sake: grouped by target, each group's listeners in
/// an array sorted by connection, and the groups indexed by document path, collection path and
/// collection-group name.
///
/// A commit looks up the few groups whose scope it touches, then walks each group's array in place:
/// no hashing per listener, and one connection's listeners of a group next to each other, so they
/// share one frame. Listeners of one target, without member tables, see the same changes of a
/// commit, worked out once for the group.
///
/// A group whose every listener takes every commit whole (no filter or cursor, no limit, no member
/// table, no read guard, not told versions only, live since before the group's last publication) keeps its listeners' ids by connection:
/// a commit then costs it one step per connection, none per listener. Any change to the group's
/// listeners drops that list, and the next publication makes it again. Pure: no I/O, no locks (the
/// hub holds it under its own).
struct ListenerTable {
    struct Group {
        let target: ListenTarget
        /// Sorted by key: by connection, then by listen id.
        var members: [ListenerState] = []
        /// The highest version published to the group.
        var publishedThrough = Version.zero
        /// When every member takes every commit whole: each connection's outbox and listener ids.
        var plain: [(outbox: SessionOutbox, targets: [Int])]?

        /// Makes `plain` again from the members, if every one takes every commit whole.
        mutating func refresh() {
            var connections: [(outbox: SessionOutbox, targets: [Int])] = []
            var session = -1
            for member in members {
                guard member.compiled == nil, !member.hasLimit, member.members == nil, member.readGuard == nil, !member.notify,
                      case .live(let through) = member.phase, through <= publishedThrough else {
                    plain = nil
                    return
                }
                if member.key.session != session {
                    session = member.key.session
                    connections.append((member.outbox, []))
                }
                connections[connections.count - 1].targets.append(member.key.target)
            }
            plain = connections
        }
    }

    private var groups: [Int: Group] = [:]
    private var groupIDs: [ListenTarget: Int] = [:]
    /// Each listener's group.
    private var places: [ListenerKey: Int] = [:]
    private var byDocument: [DocumentPath: Set<Int>] = [:]
    private var byCollection: [CollectionPath: Set<Int>] = [:]
    private var byGroup: [String: Set<Int>] = [:]
    private var nextID = 0
    /// How many listeners each connection runs.
    private var perSession: [Int: Int] = [:]

    var count: Int { places.count }

    /// How many listeners one connection runs.
    func count(ofSession session: Int) -> Int { perSession[session] ?? 0 }

    /// The listener ids of each connection of a target's group, when the group takes the one-step
    /// path (every member takes every commit whole); nil otherwise.
    func plainTargets(of target: ListenTarget) -> [[Int]]? {
        guard let id = groupIDs[target], let plain = groups[id]?.plain else { return nil }
        return plain.map(\.targets)
    }

    subscript(key: ListenerKey) -> ListenerState? {
        guard let id = places[key], let group = groups[id], let index = Self.position(of: key, in: group.members) else { return nil }
        return group.members[index]
    }

    /// Changes one listener in place; nil when there is no such listener.
    @discardableResult
    mutating func update<T>(_ key: ListenerKey, _ body: (inout ListenerState) -> T) -> T? {
        guard let id = places[key], let index = groups[id].flatMap({ Self.position(of: key, in: $0.members) }) else { return nil }
        groups[id]!.plain = nil
        return body(&groups[id]!.members[index])
    }

    mutating func insert(_ listener: ListenerState) {
        let key = listener.key
        remove(key)
        let id: Int
        if let known = groupIDs[listener.target] {
            id = known
        } else {
            nextID += 1
            id = nextID
            groupIDs[listener.target] = id
            groups[id] = Group(target: listener.target)
            switch listener.target {
            case .document(let path): byDocument[path, default: []].insert(id)
            case .collection(let path, _): byCollection[path, default: []].insert(id)
            case .collectionGroup(let name, _): byGroup[name, default: []].insert(id)
            }
        }
        places[key] = id
        perSession[key.session, default: 0] += 1
        let members = groups[id]!.members
        let index = members.firstIndex { ($0.key.session, $0.key.target) > (key.session, key.target) } ?? members.count
        groups[id]!.members.insert(listener, at: index)
        groups[id]!.plain = nil
    }

    @discardableResult
    mutating func remove(_ key: ListenerKey) -> ListenerState? {
        guard let id = places.removeValue(forKey: key), let index = groups[id].flatMap({ Self.position(of: key, in: $0.members) }) else { return nil }
        let listener = groups[id]!.members.remove(at: index)
        groups[id]!.plain = nil
        perSession[key.session]! -= 1
        if perSession[key.session] == 0 { perSession[key.session] = nil }
        if groups[id]!.members.isEmpty {
            let target = groups.removeValue(forKey: id)!.target
            groupIDs[target] = nil
            switch target {
            case .document(let path): byDocument.remove(id, at: path)
            case .collection(let path, _): byCollection.remove(id, at: path)
            case .collectionGroup(let name, _): byGroup.remove(id, at: name)
            }
        }
        return listener
    }

    /// Every listener's key.
    var keys: [ListenerKey] { Array(places.keys) }

    /// The keys of one connection's listeners.
    func keys(ofSession session: Int) -> [ListenerKey] {
        places.keys.filter { $0.session == session }
    }

    /// Calls `body` with each group whose scope holds a document at `path`.
    func groups(touching path: DocumentPath, _ body: (Int) -> Void) {
        byDocument[path]?.forEach(body)
        byCollection[path.parent]?.forEach(body)
        byGroup[path.collectionGroup]?.forEach(body)
    }

    /// Changes one group in place.
    mutating func updateGroup(_ id: Int, _ body: (inout Group) -> Void) {
        guard groups[id] != nil else { return }
        body(&groups[id]!)
    }

    /// Where a key is in a group's sorted members.
    private static func position(of key: ListenerKey, in members: [ListenerState]) -> Int? {
        var low = 0, high = members.count
        while low < high {
            let middle = (low + high) / 2
            let other = members[middle].key
            if (other.session, other.target) < (key.session, key.target) { low = middle + 1 } else { high = middle }
        }
        return low < members.count && members[low].key == key ? low : nil
    }
}

extension Dictionary where Value == Set<Int> {
    mutating func remove(_ id: Int, at index: Key) {
        self[index]?.remove(id)
        if self[index]?.isEmpty == true { self[index] = nil }
    }
}
