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
    /// retries with the engine's policy on the engine's clock, resuming from its last version. It
    /// ends when its consumer stops, or with the last error when the policy gives up.
    func passThrough(_ listen: @escaping Listen) -> AsyncThrowingStream<PassThroughUpdate, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var documents: [DocumentPath: Document] = [:]
                var resume: Version?
                var failures = 0
                while !Task.isCancelled {
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
                        failures += 1
                        log("listener_fail", ["error_description": "\(error)", "retry_count": failures], severity: .severe)
                        guard let delay = retryDelay(afterFailures: failures) else {
                            continuation.finish(throwing: error)
                            return
                        }
                        log("listener_retrying", ["retry_count": failures, "delay_seconds": delay.doubleSeconds], severity: .warning)
                        do {
                            try await clock.sleep(for: delay)
                        } catch {
                            break
                        }
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Full, query-ordered snapshots of a pass-through listener.
    func snapshots(query: Query, _ listen: @escaping Listen) -> AsyncThrowingStream<[T], any Error> {
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

    /// Updated models and deleted ids of a pass-through listener, as two streams.
    func updatesAndDeletions(_ listen: @escaping Listen)
        -> (updates: AsyncThrowingStream<T, any Error>, deletions: AsyncThrowingStream<String, any Error>)
    {
        let (updates, updatesContinuation) = AsyncThrowingStream<T, any Error>.makeStream()
        let (deletions, deletionsContinuation) = AsyncThrowingStream<String, any Error>.makeStream()
        let source = passThrough(listen)
        let task = Task {
            do {
                for try await update in source {
                    for document in update.updated {
                        if let model = self.decode(document) { updatesContinuation.yield(model) }
                    }
                    for path in update.removed { deletionsContinuation.yield(path.id) }
                }
                updatesContinuation.finish()
                deletionsContinuation.finish()
            } catch {
                updatesContinuation.finish(throwing: error)
                deletionsContinuation.finish(throwing: error)
            }
        }
        // The source stops when both consumers have.
        let open = Mutex(2)
        let stop: @Sendable (Any) -> Void = { _ in
            if open.withLock({ $0 -= 1; return $0 }) == 0 { task.cancel() }
        }
        updatesContinuation.onTermination = { stop($0) }
        deletionsContinuation.onTermination = { stop($0) }
        return (updates, deletions)
    }
}
