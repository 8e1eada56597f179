import Foundation
import Synchronization
import TandemCore

extension SyncCore {
    typealias Listen = @Sendable (Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>

    /// Starts (or replaces) the listener. Returns once the first batch is applied, or at once after
    /// the first failure (the cache stays as it is and retries run on the clock): it never hangs.
    func startListener(_ listen: @escaping Listen) async {
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            let once = ResumeOnce(started)
            let (previous, generation) = state.withLock { state -> (Task<Void, Never>?, Int) in
                state.listenerGeneration += 1
                state.listenerFailures = 0
                state.listenerDown = false
                return (state.listener, state.listenerGeneration)
            }
            previous?.cancel()
            let task = Task {
                await self.runListener(listen, generation: generation, started: once)
            }
            state.withLock { state in
                if state.listenerGeneration == generation { state.listener = task } else { task.cancel() }
            }
        }
    }

    /// Stops the listener; pending writes stay.
    func stopListener() {
        let (task, wake) = state.withLock { state -> (Task<Void, Never>?, CheckedContinuation<Void, Never>?) in
            state.listenerGeneration += 1
            state.listenerDown = false
            defer {
                state.listener = nil
                state.wake = nil
            }
            return (state.listener, state.wake)
        }
        task?.cancel()
        wake?.resume()
    }

    var isListening: Bool { state.withLock { $0.listener != nil } }

    /// Called by reads and writes: a listener waiting to retry tries again now.
    func retryNowIfDown() {
        let wake = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.listenerDown else { return nil }
            // Cleared too, so a listener that has failed but not yet started waiting retries at once.
            state.listenerDown = false
            defer { state.wake = nil }
            return state.wake
        }
        wake?.resume()
        triggerFlush(retryIfRunning: true)
    }

    private func isCurrent(_ generation: Int) -> Bool {
        state.withLock { $0.listenerGeneration == generation } && !Task.isCancelled
    }

    private func runListener(_ listen: Listen, generation: Int, started: ResumeOnce) async {
        defer { started.resume() }
        while isCurrent(generation) {
            let resumeFrom = state.withLock { $0.resumeVersion }
            log("listener_start")
            var receivedAny = false
            do {
                var pieces = BatchPieces()
                var prepared: PreparedModels?
                for try await piece in listen(resumeFrom) {
                    guard isCurrent(generation) else { return }
                    if piece.continues || prepared != nil {
                        // A batch arriving in pieces: decode its models now, while the rest comes.
                        prepared = prepared ?? PreparedModels()
                        prepared?.add(piece.changes)
                    }
                    guard let batch = pieces.add(piece) else { continue }
                    apply(batch, prepared: prepared)
                    prepared = nil
                    if !receivedAny {
                        receivedAny = true
                        state.withLock { state in
                            state.listenerFailures = 0
                            state.listenerDown = false
                        }
                        log("listener_success", ["count": batch.changes.count])
                        started.resume()
                        triggerFlush()
                    }
                }
                guard isCurrent(generation) else { return }
                throw TandemError(.unavailable, "The listener's stream ended.")
            } catch {
                guard isCurrent(generation) else { return }
                let failures = state.withLock { state -> Int in
                    state.listenerFailures = receivedAny ? 1 : state.listenerFailures + 1
                    state.listenerDown = true
                    return state.listenerFailures
                }
                log("listener_fail", ["error_description": "\(error)", "retry_count": failures], severity: .severe)
                if !receivedAny && state.withLock({ $0.isFromCache }) {
                    log("bulkLoad_fail", ["error_description": "\(error)"], severity: .severe)
                }
                started.resume()
                guard let delay = retryPolicy.delay(afterFailures: failures) else {
                    log("listener_stopped", ["error_description": "The retry policy gave up."], severity: .severe)
                    state.withLock { if $0.listenerGeneration == generation { $0.listener = nil } }
                    return
                }
                log("listener_retrying", ["retry_count": failures, "delay_seconds": delay.doubleSeconds], severity: .warning)
                await waitForRetry(delay)
            }
        }
    }

    /// Sleeps on the clock, or less when a read or write wakes the listener, or the listener stops.
    private func waitForRetry(_ delay: Duration) async {
        await WakeableSleep.sleep(on: clock, for: delay) { continuation in
            self.state.withLock { state -> Bool in
                if !state.listenerDown { return true }
                state.wake = continuation
                return false
            }
        } unpark: {
            self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.wake = nil }
                return state.wake
            }
        }
    }

    /// Applies a listener batch to the view, the models and the persistence, in one step.
    package func apply(_ batch: RemoteChangeBatch) {
        apply(batch, prepared: nil)
    }

    /// As above, with the models decoded while the batch's pieces arrived.
    func apply(_ batch: RemoteChangeBatch, prepared: PreparedModels?) {
        let changed = state.withLock { state -> [DocumentPath] in
            state.resumeVersion = batch.version
            state.isFromCache = false
            var change = LocalCollectionChange()
            change.replacesAllDocuments = batch.isSnapshot
            change.resumeVersion = batch.version
            change.upserts.reserveCapacity(batch.changes.count)
            change.encodedUpserts.reserveCapacity(batch.changes.count)
            for remote in batch.changes {
                if let document = remote.document {
                    change.upserts.append(document)
                    change.encodedUpserts.append(remote.encodedData)
                } else if !batch.isSnapshot {
                    change.deletions.append(remote.path)
                }
            }
            if batch.changes.count > 64, case .collection(let store) = persistence {
                // A large batch: the cache write needs only the batch, so it runs on one core while
                // the view and the models are brought up to date on the other.
                var changed: [DocumentPath] = []
                Parallel.both({
                    try? store.apply(change)
                }, {
                    changed = state.view.applyRemote(batch, now: Date())
                    Self.refreshModels(changed, in: &state, prepared: prepared)
                })
                return changed
            }
            let changed = state.view.applyRemote(batch, now: Date())
            try? persistence.persist(change, view: state.view, documentID: state.documentID, resumeVersion: batch.version)
            Self.refreshModels(changed, in: &state, prepared: prepared)
            return changed
        }
        if batch.isSnapshot {
            log("bulkLoad_success", ["count": batch.changes.count])
        } else {
            for remote in batch.changes {
                log(remote.document == nil ? "documentDeleted" : "documentUpdated", ["document_id": remote.path.id])
            }
        }
        if !changed.isEmpty || batch.isSnapshot { notifyChanged() }
    }
}

/// Joins the pieces of a batch (see ``RemoteChangeBatch/continues``) into the whole batch.
struct BatchPieces {
    private var changes: [RemoteChange] = []
    private var gathering = false

    /// Takes the next element of a listener stream; returns the whole batch once its last piece is in.
    mutating func add(_ piece: RemoteChangeBatch) -> RemoteChangeBatch? {
        if !piece.continues && !gathering { return piece }
        gathering = true
        changes.append(contentsOf: piece.changes)
        guard !piece.continues else { return nil }
        defer {
            changes = []
            gathering = false
        }
        var whole = piece
        whole.changes = changes
        return whole
    }
}

/// Resumes a continuation at most once, from any task.
final class ResumeOnce: Sendable {
    private let continuation: Mutex<CheckedContinuation<Void, Never>?>

    init(_ continuation: CheckedContinuation<Void, Never>) {
        self.continuation = Mutex(continuation)
    }

    func resume() {
        let taken = continuation.withLock { value -> CheckedContinuation<Void, Never>? in
            defer { value = nil }
            return value
        }
        taken?.resume()
    }
}
