import Foundation
import Synchronization
import TandemCore

/// One step of a pass-through stream: the documents it covers now, and what the batch changed.
struct PassThroughUpdate: Sendable {
    var documents: [DocumentPath: Document]
    var updated: [Document]
    var removed: [DocumentPath]
}

extension SyncCore {
    /// A listener of its own, apart from the engine's view: it keeps the documents it covers and
    /// retries with the engine's policy on the engine's clock, resuming from its last version. When
    /// the remote reports its connection down, it waits for it instead, and a backoff ends early
    /// when the connection comes back. It ends when its consumer stops, or with the last error when
    /// the policy gives up.
    func passThrough(_ listen: @escaping Listen) -> AsyncThrowingStream<PassThroughUpdate, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var documents: [DocumentPath: Document] = [:]
                var resume: Version?
                var failures = 0
                while !Task.isCancelled {
                    // Read before listening: a return of the connection after this ends the wait below.
                    let connection = self.connection.status
                    do {
                        var pieces = BatchPieces()
                        for try await piece in listen(resume) {
                            guard let batch = pieces.add(piece) else { continue }
                            failures = 0
                            var updated: [Document] = []
                            var removed: [DocumentPath] = []
                            if batch.isSnapshot {
                                let incoming = Set(batch.changes.map(\.path))
                                removed = documents.keys.filter { !incoming.contains($0) }
                                documents = [:]
                            }
                            for change in batch.changes {
                                if let document = change.document {
                                    documents[change.path] = document
                                    updated.append(document)
                                } else if documents.removeValue(forKey: change.path) != nil {
                                    removed.append(change.path)
                                }
                            }
                            resume = batch.version
                            continuation.yield(PassThroughUpdate(documents: documents, updated: updated, removed: removed))
                        }
                        throw TandemError(.unavailable, "The stream ended.")
                    } catch {
                        if Task.isCancelled { break }
                        if !self.connection.status.isConnected {
                            // The remote's reconnection is the retry: attach again once it is back.
                            log("listener_offline", ["error_description": "\(error)"], severity: .warning)
                            await self.connection.waitForResume(after: connection.resumes)
                            continue
                        }
                        failures += 1
                        log("listener_fail", ["error_description": "\(error)", "retry_count": failures], severity: .severe)
                        guard let delay = retryDelay(afterFailures: failures) else {
                            continuation.finish(throwing: error)
                            return
                        }
                        log("listener_retrying", ["retry_count": failures, "delay_seconds": delay.doubleSeconds], severity: .warning)
                        await pause(for: delay, orUntilResumedAfter: connection.resumes)
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Sleeps out a backoff on the engine's clock, ending early when the remote's connection
    /// comes back or the task is cancelled.
    private func pause(for delay: Duration, orUntilResumedAfter resumes: Int) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [clock] in try? await clock.sleep(for: delay) }
            group.addTask { [connection] in await connection.waitForResume(after: resumes) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Full, query-ordered snapshots of a pass-through listener.
    func serverSnapshots(query: Query, _ listen: @escaping Listen) -> SyncStream<[T]> {
        SyncStream(stream: { self.serverSnapshotStream(query: query, listen) })
    }

    private func serverSnapshotStream(query: Query, _ listen: @escaping Listen) -> AsyncThrowingStream<[T], any Error> {
        let updates = passThrough(listen)
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let compiled = try CompiledQuery(query)
                    for try await update in updates {
                        continuation.yield(compiled.evaluate(update.documents.values).compactMap(self.decode))
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Updated models and deleted ids of a pass-through listener, as two sequences sharing it: it
    /// starts when either is iterated, and stops when neither is.
    func updatesAndDeletions(_ listen: @escaping Listen) -> (updates: SyncStream<T>, deletions: SyncStream<String>) {
        let shared = SharedUpdates(core: self, listen: listen)
        return (SyncStream(stream: { shared.updates() }), SyncStream(stream: { shared.deletions() }))
    }
}

/// One pass-through listener feeding an updates sequence and a deletions sequence.
final class SharedUpdates<T: SyncModel>: Sendable {
    private struct State {
        var task: Task<Void, Never>?
        /// Which listener task is current: one cancelled and replaced ends nothing of its successor's.
        var generation = 0
        var updates: AsyncThrowingStream<T, any Error>.Continuation?
        var deletions: AsyncThrowingStream<String, any Error>.Continuation?
        /// Which iteration of each side is current: a later one replaces an earlier one.
        var updatesIteration = 0
        var deletionsIteration = 0
    }

    private let state = Mutex(State())
    private let core: SyncCore<T>
    private let listen: SyncCore<T>.Listen

    init(core: SyncCore<T>, listen: @escaping SyncCore<T>.Listen) {
        self.core = core
        self.listen = listen
    }

    func updates() -> AsyncThrowingStream<T, any Error> {
        let (stream, continuation) = AsyncThrowingStream<T, any Error>.makeStream()
        let (previous, iteration) = state.withLock { state in
            defer { state.updates = continuation }
            state.updatesIteration += 1
            return (state.updates, state.updatesIteration)
        }
        continuation.onTermination = { [weak self] _ in
            self?.end { if $0.updatesIteration == iteration { $0.updates = nil } }
        }
        previous?.finish()
        startIfNeeded()
        return stream
    }

    func deletions() -> AsyncThrowingStream<String, any Error> {
        let (stream, continuation) = AsyncThrowingStream<String, any Error>.makeStream()
        let (previous, iteration) = state.withLock { state in
            defer { state.deletions = continuation }
            state.deletionsIteration += 1
            return (state.deletions, state.deletionsIteration)
        }
        continuation.onTermination = { [weak self] _ in
            self?.end { if $0.deletionsIteration == iteration { $0.deletions = nil } }
        }
        previous?.finish()
        startIfNeeded()
        return stream
    }

    private func startIfNeeded() {
        state.withLock { state in
            guard state.task == nil else { return }
            let source = core.passThrough(listen)
            state.generation += 1
            let generation = state.generation
            state.task = Task { [weak self, core] in
                do {
                    for try await update in source {
                        guard let (updates, deletions) = self?.state.withLock({ ($0.updates, $0.deletions) }) else { return }
                        if let updates {
                            for document in update.updated {
                                if let model = core.decode(document) { updates.yield(model) }
                            }
                        }
                        if let deletions {
                            for path in update.removed { deletions.yield(path.id) }
                        }
                    }
                    self?.finish(throwing: nil, generation: generation)
                } catch {
                    self?.finish(throwing: error, generation: generation)
                }
            }
        }
    }

    /// A consumer stopped; the listener stops with the last one.
    private func end(_ consumer: (inout State) -> Void) {
        let task = state.withLock { state -> Task<Void, Never>? in
            consumer(&state)
            guard state.updates == nil, state.deletions == nil else { return nil }
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }

    private func finish(throwing error: (any Error)?, generation: Int) {
        let (updates, deletions) = state.withLock { state -> (AsyncThrowingStream<T, any Error>.Continuation?, AsyncThrowingStream<String, any Error>.Continuation?) in
            guard state.generation == generation, state.task != nil else { return (nil, nil) }
            defer {
                state.updates = nil
                state.deletions = nil
                state.task = nil
            }
            return (state.updates, state.deletions)
        }
        updates?.finish(throwing: error)
        deletions?.finish(throwing: error)
    }
}

extension SyncCore {
    /// The shown documents, their revisions and their metadata, from the published snapshot.
    func shownState() -> ShownState<T> {
        snapshot.shownState
    }

    /// A signal when iterated and after each change of the engine's state (documents, pending
    /// writes, rejections, metadata), coalesced for a slow reader; it ends when the engine goes.
    /// For tests that await a condition.
    package func changeSignals() -> SyncStream<Bool> {
        SyncStream { [self] in
            ObservationSource(observe: { changed in
                let token = self.addObserver(changed)
                return { self.removeObserver(token) }
            }, read: {
                self.isShutDown ? .finished : .element(true)
            })
        }
    }

    /// Snapshots of what the engine shows: the state when iterated, then after each change of
    /// its documents or their metadata, read when the consumer asks (a slow one skips states). It
    /// ends when the engine goes.
    func viewSnapshots() -> SnapshotSequence<CollectionSnapshot<T>> {
        SnapshotSequence { [self] in
            var differ = SnapshotDiffer<T>()
            return ObservationSource(observe: { changed in
                let token = self.addObserver(changed)
                return { self.removeObserver(token) }
            }, read: {
                if self.isShutDown { return .finished }
                return differ.next(self.shownState()).map { .element($0) } ?? .unchanged
            })
        }
    }

    /// A document engine's document, when iterated and after each change of it, of its metadata
    /// or of the id listened to. It ends when the engine goes.
    func documentSnapshots(path: @escaping @Sendable (String) -> DocumentPath?) -> SnapshotSequence<DocumentSnapshot<T>> {
        SnapshotSequence { [self] in
            var previous: (id: String?, revision: UInt64?, metadata: DocumentMetadata)?
            return ObservationSource(observe: { changed in
                let token = self.addObserver(changed)
                return { self.removeObserver(token) }
            }, read: {
                if self.isShutDown { return .finished }
                let snapshot = self.snapshot
                let now: (id: String?, revision: UInt64?, model: T?, metadata: DocumentMetadata)
                if let id = snapshot.documentID, let path = path(id) {
                    let revised = snapshot.revisedModel(at: path)
                    now = (id, revised?.revision, revised?.model, snapshot.metadata(at: path))
                } else {
                    now = (snapshot.documentID, nil, nil, DocumentMetadata(hasPendingWrites: false, isFromCache: snapshot.isFromCache))
                }
                if let previous, previous.id == now.id, previous.revision == now.revision, previous.metadata == now.metadata {
                    return .unchanged
                }
                previous = (now.id, now.revision, now.metadata)
                return .element(DocumentSnapshot(id: now.id, document: now.model, metadata: now.metadata))
            })
        }
    }
}
