import Foundation
import Synchronization
import TandemCore

extension SyncCore {
    typealias Listen = @Sendable (Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>

    /// Where the listener's streams come from, in a class box: a closure kept directly in the
    /// state's `Mutex` would be re-wrapped in a thunk on every access.
    final class ListenSource: Sendable {
        let listen: Listen
        init(_ listen: @escaping Listen) { self.listen = listen }
    }

    /// The listener's tasks and waiters: what its state machine's actions start, cancel and wake.
    struct ListenerTasks {
        /// The attached stream's task, with its attempt.
        var stream: (attempt: Int, task: Task<Void, Never>)?
        /// The backoff's sleep.
        var sleep: Task<Void, Never>?
        /// Whoever awaits `startListener`.
        var starts: [CheckedContinuation<Void, Never>] = []
        var source: ListenSource?
        /// The remote's connection and auth events, while the engine is there.
        var connection: ConnectionObservation?
        var auth: ConnectionObservation?
        /// Asks the remote's connection to try now (``ReachabilityReporting/wakeConnection()``).
        var wakeConnection: (@Sendable () -> Void)?
        /// What those events said last.
        var reachability = Reachability()
        /// Set once the engine is gone: nothing new starts.
        var isShutDown = false
    }

    /// What a listener event asks of the world, taken out of the state under its lock and run
    /// outside it by ``perform(_:)``.
    struct ListenerEffects {
        var cancel: [Task<Void, Never>] = []
        var resume: [CheckedContinuation<Void, Never>] = []
        var attach: (attempt: Int, resumeFrom: Version?, source: ListenSource)?
        var sleepUntil: Duration?
        var up = false
        var gaveUpAfter: Int?
    }

    /// Starts the listener on `listen`, or wakes it. With `replacing` it follows something else
    /// now (another query or document) and starts from a snapshot. Returns once the first batch is
    /// applied, or at once after the first failure (the cache stays as it is and retries run on the
    /// clock): it never hangs.
    func startListener(replacing: Bool = false, _ listen: @escaping Listen) async {
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            // On `queue`: a batch of the stream being replaced is applied before, or not at all.
            queue.enqueue { [self] in startListenerOnQueue(replacing: replacing, listen, started: started) }
        }
    }

    /// Points a document engine at the document `id` and listens to it, in one step on `queue`,
    /// so a stop asked for after this call is never undone by it. The same id again does nothing
    /// while the listener is up (one waiting out a backoff starts again at once); another id
    /// replaces the listener and the cached document, and keeps every pending write.
    func follow(documentID id: String, _ listen: @escaping Listen) async {
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            queue.enqueue { [self] in
                let switched = switchDocumentOnQueue(to: id)
                if !switched && isListenerUp {
                    started.resume()
                    return
                }
                startListenerOnQueue(replacing: switched, listen, started: started)
            }
        }
    }

    /// ``startListener(replacing:_:)``'s step, run on `queue`; `started` is resumed with the
    /// first batch, or at once when the engine is shut down.
    private func startListenerOnQueue(replacing: Bool, _ listen: @escaping Listen, started: CheckedContinuation<Void, Never>) {
        let effects = state.access { state -> ListenerEffects in
            guard !state.tasks.isShutDown else { return ListenerEffects(resume: [started]) }
            state.tasks.source = ListenSource(listen)
            state.tasks.starts.append(started)
            return Self.take(replacing ? state.listener.restart() : state.listener.start(), in: &state)
        }
        perform(effects)
    }

    /// Stops the listener; pending writes stay. On `queue`, like every start: it takes effect after
    /// each call made before it (a start still queued included) and before any made after it.
    func stopListener() {
        queue.enqueue { [self] in stopListenerNow() }
    }

    /// ``stopListener()``'s step, run on `queue`.
    func stopListenerNow() {
        perform(state.access { state in
            state.tasks.source = nil
            return Self.take(state.listener.stop(), in: &state)
        })
    }

    /// Stops everything the engine started, for good: the listener, its backoff and the sender's.
    /// A window in flight finishes; nothing new starts. Called when the engine goes; queued on
    /// `queue`, after every change asked for before it.
    func shutdown() {
        // The next engine of this key loads its cache after this one's last step, and its writes.
        EngineHandover.leave(managerKey, on: queue)
        queue.enqueue { [self] in
            shutdownOnQueue()
            cache.flush()
            EngineHandover.left(managerKey, from: queue)
        }
    }

    /// A newer engine of this `managerKey` opened while this one lives: this one stops what it
    /// started as a released one does, keeps nothing more on disk (the persistence is the newer
    /// one's), refuses writes, and tells whoever awaits a write of it that it stays queued (the
    /// newer engine loaded it, and sends it).
    func supersede() {
        EngineHandover.leave(managerKey, on: queue)
        queue.enqueue { [self] in
            let waiters = state.access { state -> [WriteWaiter] in
                state.persistence = .unreadable(TandemError(.failedPrecondition, "A newer engine with managerKey '\(managerKey)' took this one's cache and outbox over: this engine no longer listens, sends or keeps anything on disk, and the write was not made. Use the newer engine."))
                return state.sender.releaseAllWaiters()
            }
            shutdownOnQueue()
            cache.flush()
            log("superseded", severity: .warning)
            for waiter in waiters { waiter.resume(returning: .queued) }
            EngineHandover.left(managerKey, from: queue)
        }
    }

    private func shutdownOnQueue() {
        let (flushRetry, connection, auth) = state.access { state -> (Task<Void, Never>?, ConnectionObservation?, ConnectionObservation?) in
            state.tasks.isShutDown = true
            defer {
                state.flushRetry = nil
                state.tasks.connection = nil
                state.tasks.auth = nil
            }
            return (state.flushRetry, state.tasks.connection, state.tasks.auth)
        }
        flushRetry?.cancel()
        connection?.cancel()
        auth?.cancel()
        stopListenerNow()
        // Observers (snapshot sequences) look once more, and end.
        notifyChanged([])
    }

    var isShutDown: Bool { state.current.isShutDown }

    package var isListening: Bool { state.current.isListening }

    /// Whether a listener runs and is up (not waiting out a backoff).
    var isListenerUp: Bool { state.current.isListenerUp }

    /// Takes what the machine's actions ask out of the state, in its locked step.
    static func take(_ actions: [ListenerStateMachine.Action], in state: inout State) -> ListenerEffects {
        var effects = ListenerEffects()
        for action in actions {
            switch action {
            case .attach(let attempt, let resumeFrom):
                if let source = state.tasks.source, !state.tasks.isShutDown {
                    effects.attach = (attempt, resumeFrom, source)
                } else {
                    // Nothing to listen with: the machine's attempt fails at once, as a stop would.
                    _ = state.listener.stop()
                }
            case .detach(let attempt):
                if let stream = state.tasks.stream, stream.attempt == attempt {
                    effects.cancel.append(stream.task)
                    state.tasks.stream = nil
                }
            case .sleep(let until):
                effects.sleepUntil = until
            case .cancelSleep:
                if let sleep = state.tasks.sleep { effects.cancel.append(sleep) }
                state.tasks.sleep = nil
            case .up:
                effects.up = true
            case .settleStarts:
                effects.resume += state.tasks.starts
                state.tasks.starts = []
            case .gaveUp(let failures):
                effects.gaveUpAfter = failures
            }
        }
        if !state.listener.isRunning {
            // Stopped (or given up): no start waits for a batch that will not come.
            effects.resume += state.tasks.starts
            state.tasks.starts = []
        }
        return effects
    }

    /// Runs the effects after the step that took them (on `queue`): cancels, wakes, and starts
    /// the stream or the sleep.
    func perform(_ effects: ListenerEffects) {
        effects.cancel.forEach { $0.cancel() }
        effects.resume.forEach { $0.resume() }
        if let failures = effects.gaveUpAfter {
            log("listener_stopped", ["error_description": "The retry policy gave up after \(failures) failures."], severity: .severe)
        }
        if let (attempt, resumeFrom, source) = effects.attach {
            attach(attempt, source.listen(resumeFrom))
        }
        if let until = effects.sleepUntil {
            let sleep = sleep(until: until) { core in core.queue.enqueue { core.listenerRetryDue(until) } }
            let kept = state.access { state -> Bool in
                guard state.listener.phase == .down(until: until), state.tasks.sleep == nil, !state.tasks.isShutDown else { return false }
                state.tasks.sleep = sleep
                return true
            }
            if !kept { sleep.cancel() }
        }
        if effects.up { triggerFlush() }
    }

    /// A task that sleeps on the clock until `deadline` (elapsed time), then calls `due` if the
    /// engine is still there; cancelling it ends the sleep. It holds the engine only to call `due`.
    func sleep(until deadline: Duration, then due: @escaping @Sendable (SyncCore) -> Void) -> Task<Void, Never> {
        let delay = deadline - elapsed()
        return Task { [weak self, clock] in
            do {
                try await clock.sleep(for: delay)
            } catch {
                return
            }
            if let self { due(self) }
        }
    }

    /// Runs one attempt's stream, on `queue`. The attempt belongs to the space shown now: its
    /// batches are applied only while that attempt is the listener's and that space is shown. The
    /// task holds the core only while it applies a batch, so an engine that goes away is not kept
    /// alive by its listener.
    private func attach(_ attempt: Int, _ stream: AsyncThrowingStream<RemoteChangeBatch, any Error>) {
        log("listener_start")
        let (epoch, staging) = state.access { state -> (Int, (any SnapshotStaging)?) in
            if case .collection(let store) = state.persistence { return (state.space, store as? any SnapshotStaging) }
            return (state.space, nil)
        }
        let attachment = Attachment(attempt: attempt, epoch: epoch, staging: staging)
        let task = Task { [weak self] in
            var pieces = BatchPieces()
            var prepared: PreparedBatch?
            do {
                for try await piece in stream {
                    guard let self, await self.receive(piece, attachment, pieces: &pieces, prepared: &prepared) else { return }
                }
                throw TandemError(.unavailable, "The listener's stream ended.")
            } catch {
                guard let self else { return }
                self.queue.enqueue { self.listenerFailed(attempt, error) }
            }
        }
        let kept = state.access { state -> Bool in
            guard state.listener.isCurrent(attempt) else { return false }
            state.tasks.stream = (attempt, task)
            return true
        }
        if !kept { task.cancel() }
    }

    /// What a listener's stream belongs to: its attempt, the space it was attached in, and where
    /// that space's persistence stages a snapshot arriving in pieces.
    struct Attachment: Sendable {
        let attempt: Int
        let epoch: Int
        let staging: (any SnapshotStaging)?
    }

    /// Takes one element of an attempt's stream; false once the attempt is no longer attached.
    private func receive(_ piece: RemoteChangeBatch, _ attachment: Attachment, pieces: inout BatchPieces, prepared: inout PreparedBatch?) async -> Bool {
        guard !Task.isCancelled else { return false }
        if piece.continues || prepared != nil {
            // A batch arriving in pieces: decode its models (and stage a snapshot's documents)
            // now, while the rest comes.
            if prepared == nil { prepared = PreparedBatch(snapshot: piece.isSnapshot, staging: attachment.staging) }
            // In place: a copy would copy everything prepared so far, for every piece.
            prepared?.add(piece)
        }
        guard let batch = pieces.add(piece) else { return true }
        // Applied on the engine's executor; this task waits suspended, the stream's next pieces
        // gathering meanwhile.
        let ready = prepared
        let applied = await queue.run { [self] () -> Bool in
            guard apply(batch, prepared: ready, attachment: attachment) else { return false }
            let effects = state.access { Self.take($0.listener.delivered(attempt: attachment.attempt), in: &$0) }
            if effects.up { log("listener_success", ["count": batch.changes.count]) }
            perform(effects)
            return true
        }
        guard applied else { return false }
        // Freed only now, after whoever waits for the first batch was woken: a large batch takes
        // a while to free.
        withExtendedLifetime(batch) {}
        prepared = nil
        return true
    }

    /// An attempt's stream failed or ended: back off, or give up, as the machine says. On `queue`.
    private func listenerFailed(_ attempt: Int, _ error: any Error) {
        let now = elapsed()
        let random = randomness.next()
        let outcome = state.access { state -> (ListenerEffects, failures: Int, fromCache: Bool)? in
            let actions = state.listener.failed(attempt: attempt, now: now, random: random)
            guard !actions.isEmpty else { return nil }  // replaced or stopped meanwhile
            if state.tasks.stream?.attempt == attempt { state.tasks.stream = nil }
            return (Self.take(actions, in: &state), state.listener.failures, state.isFromCache)
        }
        guard let (effects, failures, fromCache) = outcome else { return }
        if effects.sleepUntil == nil, effects.gaveUpAfter == nil {
            // The connection is down: no failure of the listener, which waits for it to come back.
            log("listener_offline", ["error_description": "\(error)"], severity: .warning)
            perform(effects)
            return
        }
        log("listener_fail", ["error_description": "\(error)", "retry_count": failures], severity: .severe)
        if fromCache {
            log("bulkLoad_fail", ["error_description": "\(error)"], severity: .severe)
        }
        if let until = effects.sleepUntil {
            log("listener_retrying", ["retry_count": failures, "delay_seconds": (until - now).doubleSeconds], severity: .warning)
        }
        perform(effects)
    }

    /// The backoff's sleep until `deadline` ended. On `queue`.
    private func listenerRetryDue(_ deadline: Duration) {
        let now = elapsed()
        perform(state.access { state in
            // Only this sleep's own handle: a newer one (after a wake and another failure) stays.
            if state.listener.phase == .down(until: deadline) { state.tasks.sleep = nil }
            return Self.take(state.listener.retryDue(now: now), in: &state)
        })
    }

    /// Applies a listener batch to the view, the models and the persistence, in one step on the
    /// engine's executor, and returns once it is applied: for benchmarks and tests that drive one.
    package func applyNow(_ batch: RemoteChangeBatch) {
        applyNow(batch, prepared: nil)
    }

    /// As above, with what was prepared while its pieces arrived and the attachment it came on.
    @discardableResult
    func applyNow(_ batch: RemoteChangeBatch, prepared: PreparedBatch?, attachment: Attachment? = nil) -> Bool {
        queue.sync { apply(batch, prepared: prepared, attachment: attachment) }
    }

    /// The attachment of the listener's current attempt, as its stream would carry it: for tests
    /// that apply a batch as if it came on it, or on an earlier one (`attempt`).
    func currentAttachment(attempt: Int? = nil) -> Attachment {
        queue.sync {
            state.access { Attachment(attempt: attempt ?? $0.listener.lastAttempt, epoch: $0.space, staging: nil) }
        }
    }

    /// As above, with what was prepared while the batch's pieces arrived. The batch's models are
    /// decoded before any lock is taken; only documents with pending writes on top are decoded
    /// after the view's locked step.
    ///
    /// With `attachment`, the batch is applied only while its attempt is the listener's and its
    /// space is shown: a switch to another query, document or user (which runs on `queue` too)
    /// either comes before, and the batch is dropped (logged), or after. Returns false when it
    /// was dropped. Runs on `queue`.
    @discardableResult
    func apply(_ batch: RemoteChangeBatch, prepared: PreparedBatch?, attachment: Attachment? = nil) -> Bool {
        let models = prepared?.models ?? PreparedModels(batch.changes)
        var leftCache = false
        let applied = { () -> [DocumentPath]? in
            if let attachment {
                let (current, space) = state.access { ($0.listener.isCurrent(attachment.attempt), $0.space) }
                if space != attachment.epoch {
                    log("listener_otherSpace", ["count": batch.changes.count, "epoch": attachment.epoch])
                    return nil
                }
                if !current { return nil }
            }
            let (persistence, queryDigest) = state.access { ($0.persistence, $0.queryDigest) }
            if batch.changes.count > 64, case .collection(let store) = persistence {
                // A large batch: the cache write needs only the batch, so it runs on one core while
                // the view and the models are brought up to date on the other.
                var changed: [DocumentPath] = []
                var undecided: [Document] = []
                var failure: (any Error)?
                // Written directly, so after every change queued before it.
                cache.flush()
                Parallel.both({
                    state.access { state in
                        state.listener.applied(version: batch.version)
                        leftCache = state.isFromCache
                        state.isFromCache = false
                        if let adopted = Self.adopt(batch, models, into: &state) {
                            (changed, undecided) = adopted
                            return
                        }
                        changed = state.view.applyRemote(batch, now: Date())
                        undecided = Self.refreshModels(changed, in: &state, prepared: models)
                    }
                }, {
                    if var promotion = prepared?.promotion(of: batch) {
                        promotion.resumeQuery = queryDigest
                        do {
                            try store.apply(promotion)
                            return
                        } catch {
                            // The staged snapshot is not there whole: write the batch itself.
                        }
                    }
                    do {
                        try store.apply(Self.change(for: batch, query: queryDigest))
                    } catch {
                        failure = error
                    }
                })
                if let failure { logPersistFailure(failure) }
                installModels(undecided)
                return changed
            }
            let (changed, undecided, write) = state.access { state in
                state.listener.applied(version: batch.version)
                leftCache = state.isFromCache
                state.isFromCache = false
                let changed = state.view.applyRemote(batch, now: Date())
                let write = state.persistence.write(Self.change(for: batch, query: state.queryDigest), view: state.view, documentID: state.documentID, resumeVersion: batch.version)
                return (changed, Self.refreshModels(changed, in: &state, prepared: models), write)
            }
            // The server's state: written behind the listener.
            storeLater(write)
            installModels(undecided)
            return changed
        }()
        guard let changed = applied else { return false }
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
        return true
    }
}

extension SyncCore {
    /// What a listener batch changes in the persistence.
    static func change(for batch: RemoteChangeBatch, query: String?) -> LocalCollectionChange {
        var change = LocalCollectionChange()
        change.replacesAllDocuments = batch.isSnapshot
        change.resumeVersion = batch.version
        change.resumeQuery = query
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
        state.orderedPaths = ChunkedList(adopting: models.modelPaths)
        state.ordered = ChunkedList(adopting: models.models)
        state.revisions = newRevisions(models.models.count, in: &state)
        // The listened query's view over them.
        refreshQueryView(nil, in: &state)
        return (changed, [])
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
