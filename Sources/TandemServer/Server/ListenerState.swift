import TandemCore

/// What the hub keeps for one listener.
struct ListenerState: Sendable {
    enum Phase: Sendable {
        /// Its snapshot is being read; commits meanwhile wait here.
        case loading([CommittedBatch])
        /// Up to date through this version.
        case live(Version)
    }

    let target: ListenTarget
    let compiled: CompiledQuery?
    /// Whether the query has a limit, so a change can move documents in or out of it that the
    /// change itself does not touch: such a listener is read again instead of patched.
    let hasLimit: Bool
    let outbox: SessionOutbox
    var members: [DocumentPath: Version]?
    var phase: Phase = .loading([])

    init(target: ListenTarget, outbox: SessionOutbox) throws(TandemError) {
        self.target = target
        self.outbox = outbox
        if let query = target.query {
            let compiled = try CompiledQuery(query)
            self.compiled = compiled
            hasLimit = compiled.limit != nil
        } else {
            compiled = nil
            hasLimit = false
        }
    }

    /// Which of a commit's changes in its scope this listener should see, as codes: `index * 2`
    /// for the change itself, `index * 2 + 1` for a removal of a document that left its query.
    mutating func deliver(_ indices: [Int], of changes: [RemoteChange]) -> [Int] {
        guard let compiled else { return indices.map { $0 * 2 } }
        var codes: [Int] = []
        for index in indices {
            let change = changes[index]
            if let document = change.document, compiled.matchesFiltersAndCursors(document.data) {
                members?[change.path] = change.version
                codes.append(index * 2)
            } else if members == nil || members?.removeValue(forKey: change.path) != nil {
                codes.append(index * 2 + 1)
            }
        }
        return codes
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
