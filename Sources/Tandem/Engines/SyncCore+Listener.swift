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

    /// Whether a listener runs and is up (not waiting out a backoff).
    var isListenerUp: Bool { state.withLock { $0.listener != nil && !$0.listenerDown } }

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
                var prepared: PreparedBatch?
                for try await piece in listen(resumeFrom) {
                    guard isCurrent(generation) else { return }
                    if piece.continues || prepared != nil {
                        // A batch arriving in pieces: decode its models (and stage a snapshot's
                        // documents) now, while the rest comes.
                        if prepared == nil { prepared = PreparedBatch(snapshot: piece.isSnapshot, staging: staging) }
                        // In place: a copy would copy everything prepared so far, for every piece.
                        prepared?.add(piece)
                    }
                    guard let batch = pieces.add(piece) else { continue }
                    apply(batch, prepared: prepared)
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
                    // Freed only now, after whoever waits for the first batch was woken: a large
                    // batch takes a while to free.
                    withExtendedLifetime(batch) {}
                    prepared = nil
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
                guard let delay = retryDelay(afterFailures: failures) else {
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

    /// As above, with what was prepared while the batch's pieces arrived. The batch's models are
    /// decoded before any lock is taken; only documents with pending writes on top are decoded
    /// after the view's locked step.
    func apply(_ batch: RemoteChangeBatch, prepared: PreparedBatch?) {
        let models = prepared?.models ?? PreparedModels(batch.changes)
        var leftCache = false
        let changed = serial.withLock { _ -> [DocumentPath] in
            if batch.changes.count > 64, case .collection(let store) = persistence {
                // A large batch: the cache write needs only the batch, so it runs on one core while
                // the view and the models are brought up to date on the other.
                var changed: [DocumentPath] = []
                var undecided: [Document] = []
                var failure: (any Error)?
                Parallel.both({
                    if let promotion = prepared?.promotion(of: batch) {
                        do {
                            try store.apply(promotion)
                            return
                        } catch {
                            // The staged snapshot is not there whole: write the batch itself.
                        }
                    }
                    do {
                        try store.apply(Self.change(for: batch))
                    } catch {
                        failure = error
                    }
                }, {
                    state.withLock { state in
                        state.resumeVersion = batch.version
                        leftCache = state.isFromCache
                        state.isFromCache = false
                        if let adopted = Self.adopt(batch, models, into: &state) {
                            (changed, undecided) = adopted
                            return
                        }
                        changed = state.view.applyRemote(batch, now: Date())
                        undecided = Self.refreshModels(changed, in: &state, prepared: models)
                    }
                })
                if let failure { logPersistFailure(failure) }
                installModels(undecided)
                return changed
            }
            let (changed, undecided, write) = state.withLock { state in
                state.resumeVersion = batch.version
                leftCache = state.isFromCache
                state.isFromCache = false
                let changed = state.view.applyRemote(batch, now: Date())
                let write = persistence.write(Self.change(for: batch), view: state.view, documentID: state.documentID, resumeVersion: batch.version)
                return (changed, Self.refreshModels(changed, in: &state, prepared: models), write)
            }
            store(write)
            installModels(undecided)
            return changed
        }
        for (path, error) in models.failures { logDecodeFailure(path, error) }
        if let logger, documentID != nil {
            // A document engine's document describes the user (a profile): the seed's engines push
            // it as user properties on every update.
            for model in models.models { logger.addUserProperties(dict: model.eventParameters, isHighPriority: true) }
        }
        if batch.isSnapshot {
            log("bulkLoad_success", ["count": batch.changes.count])
        } else {
            for remote in batch.changes {
                log(remote.document == nil ? "documentDeleted" : "documentUpdated", ["document_id": remote.path.id])
            }
        }
        var changes: EngineChanges = leftCache ? .isFromCache : []
        if !changed.isEmpty || batch.isSnapshot { changes.insert(.documents) }
        if !changes.isEmpty { notifyChanged(changes) }
    }
}

extension SyncCore {
    /// What a listener batch changes in the persistence.
    static func change(for batch: RemoteChangeBatch) -> LocalCollectionChange {
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
        return change
    }

    /// A first snapshot with nothing pending, its models all prepared: the snapshot becomes the
    /// view and its models the models, with nothing left to look up. Returns the changed paths;
    /// nil, changing nothing, when it is not one.
    static func adopt(_ batch: RemoteChangeBatch, _ models: PreparedModels, into state: inout State) -> ([DocumentPath], [Document])? {
        guard batch.isSnapshot, models.paths.count == batch.changes.count, state.orderedPaths.isEmpty,
              // Models are kept in path order; a snapshot comes in it.
              models.inPathOrder,
              state.view.takesSnapshotWhole
        else { return nil }
        // Keyed here, at its final size: keyed piece by piece, the dictionary was rehashed as it
        // grew, which cost more than it saved.
        let changed = state.view.applyRemote(batch, now: Date())
        guard changed.count == models.paths.count else {
            // Not one document per change: look each model up after all.
            return (changed, refreshModels(changed, in: &state, prepared: models))
        }
        state.orderedPaths = models.modelPaths
        state.ordered = models.models
        return (changed, [])
    }

    /// The persistence, when it can stage a snapshot while it arrives.
    var staging: (any SnapshotStaging)? {
        if case .collection(let store) = persistence { return store as? any SnapshotStaging }
        return nil
    }

    /// The work done on a batch's pieces while the rest arrives: their models decoded, and a
    /// snapshot's documents staged in the persistence, so applying the batch only swaps them in.
    struct PreparedBatch {
        var models = PreparedModels()
        private let staging: (any SnapshotStaging)?
        /// The staged snapshot's id.
        private let staged: Int?
        private var stagedCount = 0

        init(snapshot: Bool, staging: (any SnapshotStaging)?) {
            self.staging = snapshot ? staging : nil
            staged = self.staging.map { _ in SnapshotIDs.next() }
        }

        mutating func add(_ piece: RemoteChangeBatch) {
            models.add(piece.changes)
            // The last piece is written with the swap, in the same transaction.
            guard piece.continues, let staging, let id = staged else { return }
            staging.stage(piece.changes, snapshot: id, startsSnapshot: stagedCount == 0)
            stagedCount += piece.changes.count
        }

        /// The change that swaps the staged snapshot in with the rest of `batch`; nil when
        /// nothing (or not all of it) was staged.
        func promotion(of batch: RemoteChangeBatch) -> LocalCollectionChange? {
            guard let id = staged, stagedCount > 0, batch.isSnapshot, stagedCount <= batch.changes.count else { return nil }
            var change = LocalCollectionChange()
            change.replacesAllDocuments = true
            change.promotesStagedSnapshot = id
            change.resumeVersion = batch.version
            for remote in batch.changes[stagedCount...] {
                guard let document = remote.document else { continue }
                change.upserts.append(document)
                change.encodedUpserts.append(remote.encodedData)
            }
            return change
        }
    }
}

/// Ids for staged snapshots, unique in the process.
enum SnapshotIDs {
    private static let last = Atomic<Int>(0)

    static func next() -> Int { last.add(1, ordering: .relaxed).newValue }
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
