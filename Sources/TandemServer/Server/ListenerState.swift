import TandemCore

/// What the hub keeps for one listener.
struct ListenerState: Sendable {
    enum Phase: Sendable {
        /// Its snapshot is being read; commits meanwhile wait here.
        case loading([CommittedBatch])
        /// Up to date through this version.
        case live(Version)
    }

    let key: ListenerKey
    let target: ListenTarget
    /// The query, when it has filters or cursors; nil when every document in scope belongs.
    let compiled: CompiledQuery?
    /// Whether the query has a limit, so a change can move documents in or out of it that the
    /// change itself does not touch: such a listener is read again instead of patched.
    let hasLimit: Bool
    let outbox: SessionOutbox
    /// For a document listener whose access rules read the document: each document it is sent
    /// is checked first, and a refusal stops it.
    let readGuard: ReadGuard?
    /// On a server with access rules: a filtered listener then always loads a snapshot, so it
    /// knows its members and is told only of documents it had leaving (a resume without members
    /// would name every document in scope that a commit touched).
    let restricted: Bool
    /// Told each commit's version only, without its changes (`"notify": true`).
    let notify: Bool
    var members: [DocumentPath: Version]?
    var phase: Phase = .loading([])
    /// Which registration this is: a listener stopped and started again under the same key is a
    /// new one, and a load or re-read begun for the old one must not land on it.
    var registration = 0

    init(key: ListenerKey, target: ListenTarget, outbox: SessionOutbox, readGuard: ReadGuard? = nil, restricted: Bool = false, notify: Bool = false) throws(TandemError) {
        self.key = key
        self.target = target
        self.outbox = outbox
        self.readGuard = readGuard
        self.restricted = restricted
        self.notify = notify
        if let query = target.query {
            let compiled = try CompiledQuery(query)
            self.compiled = compiled.filters.isEmpty && compiled.start == nil && compiled.end == nil ? nil : compiled
            hasLimit = compiled.limit != nil
        } else {
            compiled = nil
            hasLimit = false
        }
    }

    /// What a listener does with commits that touch its scope.
    enum Receipt {
        /// Send it these changes (as codes, see ``deliver(_:of:)``).
        case deliver([Int], SessionOutbox)
        /// Read its query again (a limit listener).
        case requery
        /// Nothing to send: it holds these commits already, buffers them while it loads, or none
        /// of them concerns it.
        case nothing
    }

    /// Takes the changes (indices into `changes`, each carrying its commit's version, oldest
    /// first) of commits that touch the listener's scope, and says what to do.
    ///
    /// `shared` holds, for this publication, the changes worked out by a listener of the same
    /// target without a member table: another such listener gets them as they are.
    mutating func receive(_ indices: [Int], of changes: [RemoteChange], shared: inout [Int]?) -> Receipt {
        switch phase {
        case .loading(var buffered):
            // Kept, commit by commit, until the snapshot is sent.
            var start = 0
            while start < indices.count {
                let version = changes[indices[start]].version
                var end = start
                while end < indices.count, changes[indices[end]].version == version { end += 1 }
                buffered.append(CommittedBatch(version: version, changes: indices[start..<end].map { changes[$0] }))
                start = end
            }
            phase = .loading(buffered)
            return .nothing
        case .live(let through):
            // Its snapshot was read after some of these commits became visible and before they
            // were published: it holds those already.
            let fresh: [Int]
            if changes[indices[0]].version > through {
                fresh = indices
            } else if changes[indices[indices.count - 1]].version > through {
                fresh = indices.filter { changes[$0].version > through }
            } else {
                return .nothing
            }
            let last = fresh[fresh.count - 1]
            if hasLimit {
                // A limit's result depends on documents outside it: read it again.
                phase = .loading([])
                return .requery
            }
            let codes: [Int]
            if members == nil, fresh.count == indices.count {
                if let known = shared {
                    codes = known
                } else {
                    codes = deliver(fresh, of: changes)
                    shared = codes
                }
            } else {
                codes = deliver(fresh, of: changes)
            }
            phase = .live(changes[last].version)
            return codes.isEmpty ? .nothing : .deliver(codes, outbox)
        }
    }

    /// Which of a commit's changes in its scope this listener should see, as codes: `index * 2`
    /// for the change itself, `index * 2 + 1` for a removal of a document that left its query.
    mutating func deliver(_ indices: [Int], of changes: [RemoteChange]) -> [Int] {
        guard let compiled else { return indices.map { $0 * 2 } }
        var codes: [Int] = []
        codes.reserveCapacity(indices.count)
        for index in indices {
            // Read in place: a change is not copied for each listener it is matched against.
            if changes[index].document.map({ compiled.matchesFiltersAndCursors($0.data) }) == true {
                members?[changes[index].path] = changes[index].version
                codes.append(index * 2)
            } else if members == nil || members?.removeValue(forKey: changes[index].path) != nil {
                codes.append(index * 2 + 1)
            }
        }
        return codes
    }

    /// The refusal of the first change its read guard refuses, if any.
    func refusal(of changes: [RemoteChange]) -> TandemError? {
        readGuard?.refusal(of: changes)
    }

    /// The changes that `deliver`'s codes stand for.
    static func changes(_ codes: [Int], of changes: [RemoteChange]) -> [RemoteChange] {
        codes.map { code in
            let change = changes[code / 2]
            if code % 2 == 0 { return change }
            return RemoteChange(path: change.path, document: nil, version: change.version, mutationID: change.mutationID)
        }
    }
}
