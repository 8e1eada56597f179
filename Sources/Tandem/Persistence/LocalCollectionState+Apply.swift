import TandemCore

extension LocalCollectionState {
    /// Applies a change in memory, as a persistence applies it on disk.
    public mutating func apply(_ change: LocalCollectionChange) {
        if change.replacesAllDocuments { documents = [] }
        if !change.upserts.isEmpty || !change.deletions.isEmpty {
            var byPath = Dictionary(documents.map { ($0.path, $0) }, uniquingKeysWith: { _, last in last })
            for document in change.upserts { byPath[document.path] = document }
            for path in change.deletions { byPath[path] = nil }
            documents = byPath.values.sorted { $0.path < $1.path }
        }
        var entries = Array(outbox.entries)
        let removed = Set(change.outboxRemovals)
        entries.removeAll { removed.contains($0.id) }
        for put in change.outboxPuts {
            if let index = entries.firstIndex(where: { $0.id == put.id }) {
                entries[index] = put
            } else {
                entries.append(put)
            }
        }
        entries.sort { $0.id.sequence < $1.id.sequence }
        outbox = Outbox(clientID: outbox.clientID, entries: entries, nextSequence: max(outbox.nextSequence, change.nextSequence ?? 0))
        if change.forgetsResumePoint {
            resumeVersion = nil
            resumeQuery = nil
        }
        if let resume = change.resumeVersion {
            resumeVersion = resume
            resumeQuery = change.resumeQuery
        }
    }
}
