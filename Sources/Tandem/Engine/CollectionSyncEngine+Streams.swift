import TandemCore

extension CollectionSyncEngine {
    /// What ``currentCollection`` shows, with its changes and metadata: the state when iterated,
    /// then one snapshot after each change of the documents or of their metadata (a local write,
    /// an acknowledgement, a server change, leaving the cache). No listener of its own: it follows
    /// the engine's, with pending writes applied. A reader slower than the changes gets the latest
    /// state, its changes counted from the snapshot it read before. It ends when the engine goes.
    ///
    /// ```swift
    /// for try await snapshot in engine.snapshots() {
    ///     render(snapshot.documents, saving: snapshot.metadata.hasPendingWrites)
    /// }
    /// ```
    public func snapshots() -> SnapshotSequence<CollectionSnapshot<T>> {
        core.viewSnapshots()
    }

    /// One document from the server as it changes (nil while it does not exist). A listener of its
    /// own, started when the sequence is iterated: it never touches ``currentCollection``, and it
    /// retries with the engine's policy.
    public func streamDocument(id: String) -> SyncStream<T?> {
        let remote = self.remote
        let core = self.core
        return SyncStream(stream: {
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
        })
    }

    /// The query's documents from the server, in query order, after every change. A listener of
    /// its own, started when the sequence is iterated.
    public func streamCollection(buildQuery: (Query) -> Query = { $0 }) -> SyncStream<[T]> {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.serverSnapshots(query: query) { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }

    /// The query's documents as they are added or changed, and the ids of those removed. One
    /// listener of their own, started when either sequence is iterated and stopped when neither is.
    public func streamCollectionUpdates(buildQuery: (Query) -> Query = { $0 }) -> (updates: SyncStream<T>, deletions: SyncStream<String>) {
        let query = buildQuery(Query())
        let remote = self.remote
        return core.updatesAndDeletions { resumeFrom in remote.listen(query: query, resumeFrom: resumeFrom) }
    }
}
