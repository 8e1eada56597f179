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

    /// The changes this listener should see from a commit's changes in its scope: documents that
    /// match its query, and removals of documents that left it.
    mutating func deliver(_ changes: [RemoteChange], version: Version) -> [RemoteChange] {
        guard let compiled else { return changes }
        var delivered: [RemoteChange] = []
        for change in changes {
            if let document = change.document, compiled.matchesFiltersAndCursors(document.data) {
                members?[change.path] = change.version
                delivered.append(change)
            } else if members == nil || members?.removeValue(forKey: change.path) != nil {
                delivered.append(RemoteChange(path: change.path, document: nil, version: change.version, mutationID: change.mutationID))
            }
        }
        return delivered
    }
}
