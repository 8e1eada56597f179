import GRDB

extension CollectionSyncEngine {
    /// Keeps `Model`'s table in step with the engine: each time the engine's documents change
    /// (a server change, a local write, a removal), they are reconciled into the table as a full
    /// slice, each turned into a DTO by `dto`. Rows of `scope` the engine no longer shows follow
    /// `deletionPolicy`, down to none once the server says the collection is empty (an empty
    /// cache deletes nothing). Nothing runs until the sequence is iterated; it yields each run's summary,
    /// ends when the engine goes, and ends with the error of a run that fails (the table is then as
    /// it was before that run). A reader slower than the changes reconciles the latest documents.
    ///
    /// ```swift
    /// let feed = engine.reconcile(into: Reconciler(writer: dbQueue), as: TrackRow.self, deletionPolicy: .softDeleteMissing) {
    ///     TrackDTO(id: $0.id, title: $0.title, updatedAt: $0.updatedAt)
    /// }
    /// Task { for try await summary in feed { print("reconciled", summary.touchedIDs) } }
    /// ```
    public func reconcile<Model: SyncableModel>(
        into reconciler: Reconciler, as type: Model.Type = Model.self, deletionPolicy: DeletionPolicy,
        scope: QueryInterfaceRequest<Model>? = nil, childTasks: [AnyChildTask<Model>] = [],
        dto: @escaping @Sendable (T) -> Model.DTO
    ) -> SyncStream<ReconcileSummary> {
        let snapshots = self.snapshots()
        return SyncStream {
            ReconcileSource(snapshots.makeAsyncIterator()) { documents, fromServer in
                // An empty collection the server confirmed is a full slice too; an empty cache is not.
                try await reconciler.upsertCollection(type, from: documents.map(dto), deletionPolicy: deletionPolicy, scope: scope, childTasks: childTasks,
                                                      requireNonEmptyFullSlice: !fromServer)
            }
        }
    }

    /// ``reconcile(into:as:deletionPolicy:scope:childTasks:dto:)`` for documents that are the
    /// DTOs themselves.
    public func reconcile<Model: SyncableModel>(
        into reconciler: Reconciler, as type: Model.Type = Model.self, deletionPolicy: DeletionPolicy,
        scope: QueryInterfaceRequest<Model>? = nil, childTasks: [AnyChildTask<Model>] = []
    ) -> SyncStream<ReconcileSummary> where Model.DTO == T {
        reconcile(into: reconciler, as: type, deletionPolicy: deletionPolicy, scope: scope, childTasks: childTasks) { $0 }
    }
}

/// Reconciles each snapshot whose documents changed (the first one always).
final class ReconcileSource<T: SyncModel>: SyncStreamSource {
    private var snapshots: SnapshotSequence<CollectionSnapshot<T>>.Iterator
    private var first = true
    private let run: @Sendable ([T], Bool) async throws -> ReconcileSummary

    /// `run` takes the documents, and whether they come from the server (not the cache).
    init(_ snapshots: SnapshotSequence<CollectionSnapshot<T>>.Iterator, run: @escaping @Sendable ([T], Bool) async throws -> ReconcileSummary) {
        self.snapshots = snapshots
        self.run = run
    }

    func next() async throws -> ReconcileSummary? {
        while let snapshot = await snapshots.next() {
            // A change of metadata alone (an acknowledgement) leaves the documents as they were.
            if !first, snapshot.documentChanges.isEmpty { continue }
            first = false
            return try await run(snapshot.documents, !snapshot.metadata.isFromCache)
        }
        return nil
    }
}
