import TandemCore

extension CollectionSyncEngine {
    /// One document from the server as it changes (nil while it does not exist). A listener of its
    /// own: it never touches ``currentCollection``, and it retries with the engine's policy.
    public func streamDocument(id: String) -> AsyncThrowingStream<T?, any Error> {
        let remote = self.remote
        let core = self.core
        let updates = core.passThrough { resumeFrom in remote.listenDocument(id: id, resumeFrom: resumeFrom) }
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await update in updates {
                        continuation.yield(update.documents.values.first.flatMap(core.decode))
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The query's documents from the server, in query order, after every change. A listener of its own.
    public func streamCollection(buildQuery: (Query) -> Query = { $0 }) -> AsyncThrowingStream<[T], any Error> {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.snapshots(query: query) { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }

    /// The query's documents as they are added or changed, and the ids of those removed. A listener of its own.
    public func streamCollectionUpdates(buildQuery: (Query) -> Query = { $0 })
        -> (updates: AsyncThrowingStream<T, any Error>, deletions: AsyncThrowingStream<String, any Error>)
    {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.updatesAndDeletions { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }
}
