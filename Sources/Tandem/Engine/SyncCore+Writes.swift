import Foundation
import TandemCore

extension SyncCore {
    /// Applies a write to the view and records it in the outbox, durably, in one step; then sends
    /// it (in order, after earlier writes) and waits for the first answer.
    ///
    /// Returns when the server acknowledged it, or when it stays queued because the server cannot
    /// be reached (it is retried and replayed, never lost). Throws the server's error when the
    /// write is refused for good: it is then rolled back from the view and listed in `rejected`.
    @discardableResult
    func write(_ mutation: Mutation, event: String, parameters extra: [String: any Sendable] = [:]) async throws -> WriteOutcome {
        let parameters = extra.merging(["document_id": mutation.path.id]) { $1 }
        log("\(event)_start", parameters)
        do {
            try mutation.validate()
        } catch {
            log("\(event)_fail", parameters.merging(["error_description": error.message]) { $1 }, severity: .severe)
            throw error
        }
        // The waiter is registered in the same locked step as the enqueue: a sender already running
        // could otherwise send and acknowledge the entry before anyone waits for its answer. The
        // sender takes entries on `queue`, so it never sees one that is not durable yet.
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<WriteOutcome, Never>) in
            queue.enqueue { [self] in
                announce(record(mutation, waiter: .continuation(continuation)), .continuation(continuation), ["document_id": mutation.path.id])
            }
        }
        try report(outcome, event: event, parameters)
        return outcome
    }

    /// Applies a write to the view and the outbox and makes it durable, in one step on `queue`;
    /// registers its waiter in it, unless the sender would only answer that it stays queued.
    /// Returns the outbox's size, or the error that kept the write from disk (it is then undone in
    /// memory too).
    private func record(_ mutation: Mutation, waiter continuation: WriteWaiter) -> Result<Recorded, any Error> {
        let path = mutation.path
        let now = Date()
        let (result, previousLast, write, recorded) = state.access { state in
            let previousLast = state.view.outbox.entries.last
            let result = state.view.enqueue(mutation, now: now)
            var change = LocalCollectionChange()
            change.outboxPuts = [result.entry]
            change.nextSequence = state.view.outbox.nextSequence
            let waits = !state.sender.answersQueuedAtOnce
            if waits { state.sender.wait(for: result.entry.id, continuation) }
            let write = state.persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.listener.resumeVersion)
            return (result, previousLast, write, Recorded(pendingCount: state.view.outbox.count, waits: waits))
        }
        // The outbox's row goes to disk while the view's model is made: nothing outside this
        // step sees either before the write is durable.
        let disk = cache.start(write)
        installModels(refreshModels(showing: [path]))
        do {
            try disk.wait()
        } catch {
            // Not durable, so not accepted: undo it in memory too.
            let undone = state.access { state -> [Document] in
                if recorded.waits { _ = state.sender.stopWaiting(for: result.entry.id) }
                switch result {
                case .appended(let entry): state.view.removeEntry(entry.id, now: now)
                case .merged: state.view.restoreLast(previousLast!, now: now)
                }
                return Self.refreshModels([path], in: &state)
            }
            installModels(undone)
            return .failure(error)
        }
        return .success(recorded)
    }

    /// Puts in place the models of what the view shows at `paths` now, after a local write:
    /// decoded here, where the view cannot change meanwhile. Returns what is left to
    /// ``installModels(_:)``.
    private func refreshModels(showing paths: [DocumentPath]) -> [Document] {
        let shown = state.access { state in paths.compactMap { state.view.documents[$0] } }
        let prepared = PreparedModels(showing: shown)
        let undecided = state.access { Self.refreshModels(paths, in: &$0, prepared: prepared) }
        for (path, error) in prepared.failures { logDecodeFailure(path, error) }
        return undecided
    }

    /// A write recorded durably: the outbox's size after it, and whether its caller waits for the
    /// sender's answer (not when it would only hear that the write stays queued: see
    /// `OutboxSender.answersQueuedAtOnce`).
    struct Recorded {
        var pendingCount: Int
        var waits: Bool
    }

    /// As ``record(_:waiter:)`` for an atomic batch: every write of it, or none.
    private func record(batch mutations: [Mutation], waiter continuation: WriteWaiter) -> Result<Recorded, any Error> {
        let paths = mutations.map(\.path)
        let now = Date()
        let (added, write, recorded) = state.access { state in
            let added = state.view.enqueue(batch: mutations, now: now)
            var change = LocalCollectionChange()
            change.outboxPuts = added
            change.nextSequence = state.view.outbox.nextSequence
            // Every write of the batch is answered together; its first one carries the waiter.
            let waits = !state.sender.answersQueuedAtOnce
            if waits { state.sender.wait(for: added[0].id, continuation) }
            let write = state.persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.listener.resumeVersion)
            return (added, write, Recorded(pendingCount: state.view.outbox.count, waits: waits))
        }
        let disk = cache.start(write)
        installModels(refreshModels(showing: Array(Set(paths)).sorted()))
        do {
            try disk.wait()
        } catch {
            // Not durable, so not accepted: none of it stays.
            let undone = state.access { state -> [Document] in
                if recorded.waits { _ = state.sender.stopWaiting(for: added[0].id) }
                for entry in added.reversed() { state.view.removeEntry(entry.id, now: now) }
                return Self.refreshModels(paths, in: &state)
            }
            installModels(undone)
            return .failure(error)
        }
        return .success(recorded)
    }

    /// After a write is recorded (or could not be): publishes the view, answers the caller when it
    /// hears at once, and starts the sender.
    ///
    /// An app's write (`wakes`) also does what ``retryNowIfDown()`` does for a read, in this same
    /// step: a listener waiting out a backoff tries again, and a window in flight that fails is
    /// sent again at once; with the connection down and an attempt failed on it, the sender rests
    /// and the remote's connection is asked to try now (see `flushNow`). One step per write, where
    /// a wake queued ahead of it would start a send the write then waits behind.
    private func announce(_ enqueued: Result<Recorded, any Error>, _ continuation: WriteWaiter, _ parameters: [String: any Sendable], wakes: Bool = true) {
        // The replaced snapshot is freed after the caller is resumed: it may be the last holder of
        // the chunks this write copied.
        let retired = notifyChanged([.documents, .pendingWrites])
        defer { withExtendedLifetime(retired) {} }
        switch enqueued {
        case .failure(let error):
            continuation.resume(returning: .notStored(error))
        case .success(let recorded):
            log("pendingWriteAdded", parameters.merging(["pending_write_count": recorded.pendingCount]) { $1 })
            if !recorded.waits { continuation.resume(returning: .queued) }
        }
        if wakes {
            wakeListener()
            flushNow(retryIfRunning: true)
        } else if case .success = enqueued {
            flushNow(retryIfRunning: false)
        }
    }

    /// Logs a write's outcome as `{event}_success` or `_fail`, and throws its error.
    private func report(_ outcome: WriteOutcome, event: String, _ parameters: [String: any Sendable]) throws {
        switch outcome {
        case .notStored(let error):
            log("\(event)_fail", parameters.merging(["error_description": "\(error)"]) { $1 }, severity: .severe)
            throw error
        case .acknowledged, .queued:
            log("\(event)_success", parameters)
        case .rejected(let error):
            log("\(event)_fail", parameters.merging(["error_description": error.message]) { $1 }, severity: .severe)
            throw error
        }
    }

    /// Applies an atomic batch of writes to the view and the outbox in one durable step, then sends
    /// it as one request: the server applies every write or none. Returns and throws as ``write``.
    @discardableResult
    func writeBatch(_ mutations: [Mutation], maximumWrites: Int = 500) async throws -> WriteOutcome? {
        log("batch_start", ["write_count": mutations.count])
        guard !mutations.isEmpty else {
            log("batch_success", ["write_count": 0])
            return nil
        }
        do {
            guard mutations.count <= maximumWrites else {
                throw TandemError.invalidArgument("A batch holds at most \(maximumWrites) writes and this one has \(mutations.count); split it into several batches.")
            }
            for mutation in mutations { try mutation.validate() }
        } catch let error as TandemError {
            log("batch_fail", ["write_count": mutations.count, "error_description": error.message], severity: .severe)
            throw error
        }
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<WriteOutcome, Never>) in
            queue.enqueue { [self] in
                announce(record(batch: mutations, waiter: .continuation(continuation)), .continuation(continuation), ["write_count": mutations.count])
            }
        }
        try report(outcome, event: "batch", ["write_count": mutations.count])
        return outcome
    }

    /// Queues an atomic batch of writes on the engine's executor now, in the caller's order, without
    /// waiting: for callers that cannot await (synced state's `withLock`). It is taken into the
    /// view and the outbox, durably, after every change queued before it, then sent as
    /// ``writeBatch(_:maximumWrites:)`` sends it. Throws at once when a write is invalid; the
    /// ticket tells when it is recorded and what became of it; `recorded` is called once it is (on
    /// the engine's executor, after observers heard of it).
    ///
    /// `epoch` is the space the writes were made from (``spaceEpoch`` when the caller read what it
    /// changed): when the engine shows another space by the time they are recorded (a user
    /// switch came between), none is, and the ticket's outcome is `notStored`. One user's edit is
    /// never recorded in another's space.
    func enqueueBatch(_ mutations: [Mutation], maximumWrites: Int = 500, epoch: Int? = nil, recorded: (@Sendable () -> Void)? = nil) throws(TandemError) -> WriteTicket {
        guard !mutations.isEmpty else {
            throw TandemError.invalidArgument("A batch holds at least one write.")
        }
        guard mutations.count <= maximumWrites else {
            throw TandemError.invalidArgument("A batch holds at most \(maximumWrites) writes and this one has \(mutations.count); split it into several batches.")
        }
        for mutation in mutations { try mutation.validate() }
        let ticket = WriteTicket()
        queue.enqueue { [self] in
            let result: Result<Recorded, any Error>
            if let epoch, epoch != state.access({ $0.space }) {
                log("batch_otherSpace", ["write_count": mutations.count, "epoch": epoch], severity: .warning)
                result = .failure(TandemError(.aborted, "The signed-in user changed before this edit was saved, so it was not: it was made to the previous user's data. Make it again if it is still wanted."))
            } else {
                result = record(batch: mutations, waiter: .ticket(ticket))
            }
            announce(result, .ticket(ticket), ["write_count": mutations.count], wakes: false)
            // After the announcement published it: whoever sees the ticket recorded finds the
            // write in the engine's snapshot.
            ticket.markRecorded()
            recorded?()
        }
        return ticket
    }

    /// Wakes the sender: it sends the front of the outbox at once unless a window is in flight.
    /// Any write, read or reconnect calls this. With `retryIfRunning` (a reconnection), a window
    /// in flight that then fails is sent again at once: it may have failed on the connection that
    /// was just replaced.
    ///
    /// Queued on `queue`, after every write recorded before it: the caller (the connection's
    /// reader, a read) never waits for the disk.
    func triggerFlush(retryIfRunning: Bool = false) {
        queue.enqueue { [self] in flushNow(retryIfRunning: retryIfRunning) }
    }

    /// As ``triggerFlush(retryIfRunning:)``, in the current step on `queue`.
    private func flushNow(retryIfRunning: Bool) {
        let (action, retry, released, wake) = state.access { state in
            let (action, retry) = Self.take(state.sender.wake(outbox: state.view.outbox, reconnected: retryIfRunning), in: &state)
            // Down with an attempt failed on it, the sender rests: the connection is asked to try
            // now instead, and its `resumed` sends.
            let wake = state.sender.restsUntilResumed && !state.sender.isHeld ? state.tasks.wakeConnection : nil
            return (action, retry, state.sender.releaseWaitersIfHeld(), wake)
        }
        // Signed out, nothing is sent: a write's caller hears it is queued.
        released.forEach { $0.resume(returning: .queued) }
        wake?()
        run(action, cancelling: retry)
    }

    /// The remote's connection is back: the sender sends at once.
    /// Queued on `queue`, as ``triggerFlush(retryIfRunning:)``.
    func resumeSender() {
        queue.enqueue { [self] in
            let (action, retry) = state.access { state in
                Self.take(state.sender.resumed(outbox: state.view.outbox), in: &state)
            }
            run(action, cancelling: retry)
        }
    }

    /// The backoff's deadline came.
    private func retryDue() {
        queue.enqueue { [self] in
            let (action, retry) = state.access { state in
                Self.take(state.sender.retryDue(outbox: state.view.outbox, now: elapsed()), in: &state)
            }
            run(action, cancelling: retry)
        }
    }

    /// The in-memory part of a sender action, under the locks (on `queue`, so every write it
    /// sends is durable): a window's writes are marked as sent, so none is merged with a later
    /// write, and a backoff sleep is taken out to be cancelled.
    private static func take(_ action: Sender.Action, in state: inout State) -> (Sender.Action, Task<Void, Never>?) {
        guard case .send(let window) = action else { return (action, nil) }
        // A window is the front of the outbox.
        state.view.markAttempted(first: window.reduce(0) { $0 + $1.entries.count })
        defer { state.flushRetry = nil }
        return (action, state.flushRetry)
    }

    /// Runs a sender action's outside part: a window goes out, or a backoff sleep starts.
    private func run(_ action: Sender.Action, cancelling retry: Task<Void, Never>?) {
        retry?.cancel()
        switch action {
        case .send(let window):
            // Readers see the entries' attempts.
            publish()
            // The engine is gone: its writes wait on disk for the next one.
            guard !state.access({ $0.tasks.isShutDown }) else { return }
            log("syncPendingWrites_start", ["pending_write_count": pendingWriteCount])
            // The window belongs to the space shown now (this step runs on `queue`, where spaces
            // switch): its answers are settled only while that space is still shown.
            let (epoch, user) = state.access { ($0.space, $0.user) }
            Task { [weak self] in await self?.send(window, epoch: epoch, user: user) }
        case .sleep(let deadline):
            let sleeper = sleep(until: deadline) { $0.retryDue() }
            state.access { state in
                if case .waiting = state.sender.phase, state.flushRetry == nil, !state.tasks.isShutDown { state.flushRetry = sleeper } else { sleeper.cancel() }
            }
        case .none:
            break
        }
    }

    /// Sends windows until the outbox is empty or a failure that may pass stops it. `epoch` is the
    /// space the windows belong to (``State/space``), and `user` that space's user: the client
    /// sends them on a connection signed in as that user only (after a sign-in the engine has
    /// not heard yet, they fail as unavailable, and stay queued in their space).
    private func send(_ first: [Sender.Request], epoch: Int, user: String?) async {
        var window = first
        while true {
            var answers = await commit(window.map { request in
                var write = request.writeRequest
                write.madeFor = .some(user)
                return write
            })
            if answers.count != window.count {
                // A remote that answers another number of requests than it was sent: what it did
                // with them is unknown, so every one stays queued and is sent again.
                log("syncPendingWrites_badAnswer", ["request_count": window.count, "answer_count": answers.count], severity: .severe)
                answers = window.map { _ in .failure(TandemError(.internal, "The remote answered \(answers.count) of \(window.count) write requests.")) }
            }
            guard let next = await settle(answers, epoch: epoch, writer: window.first?.entries.first?.id.clientID) else { return }
            window = next
        }
    }

    /// Records the answers to a window in one durable step on `queue`: acknowledged writes leave
    /// the outbox with their results in the base, rejected ones leave the outbox and the view.
    /// Then tells the waiters and observers, and takes the sender's next action there. Returns the
    /// next window when the sender goes on sending from this task.
    ///
    /// Answers to a window sent from another space than the one shown now, or from an earlier
    /// showing of this one (`epoch` is the space it was sent from, `writer` its writer id), are
    /// not this sender's to settle: they are dropped (logged), and their writes stay queued in
    /// their space, sent again (and answered `replayed` if they were applied) by its own sender.
    private func settle(_ answers: [Result<[WriteAcknowledgement], any Error>], epoch: Int, writer: String?) async -> [Sender.Request]? {
        let random = randomness.next()
        return await queue.run { [self] () -> [Sender.Request]? in
            guard state.access({ state in state.space == epoch && (writer.map { $0 == state.view.outbox.clientID } ?? true) }) else {
                log("syncPendingWrites_otherSpace", ["request_count": answers.count, "epoch": epoch])
                return nil
            }
            let (settlement, write, undecided, action, retry, refetched) = state.access { state in
                let settlement = state.sender.answered(answers)
                var change = LocalCollectionChange()
                var refetched: [(DocumentPath, Version)] = []
                // Each document a write was acknowledged for, once, with the version it reached.
                var cached: [DocumentPath: Version] = [:]
                // The documents whose data the view shows changed: only their models are decoded
                // again (after this step). An acknowledgement of what the view showed changes none.
                var changed: [DocumentPath] = []
                var rejectedNow: [RejectedWrite] = []
                let now = Date()
                for (entry, decision) in settlement.decisions {
                    change.outboxRemovals.append(entry.id)
                    switch decision {
                    case .acknowledged(let acknowledgement) where acknowledgement.status == .unknown:
                        // Decided so long ago that the server no longer knows the answer: the
                        // write leaves the outbox, the view falls back to what the engine knows of
                        // the server's state, and the document is read again; nothing is assumed deleted.
                        state.view.removeEntry(entry.id, now: now)
                        changed.append(entry.path)
                        refetched.append((entry.path, acknowledgement.version))
                    case .acknowledged(let acknowledgement):
                        if state.view.acknowledge(entry, result: acknowledgement.document, version: acknowledgement.version, now: now) {
                            changed.append(entry.path)
                        }
                        cached[entry.path] = max(acknowledgement.version, cached[entry.path] ?? .zero)
                    case .rejected(let error):
                        state.view.removeEntry(entry.id, now: now)
                        changed.append(entry.path)
                        rejectedNow.append(RejectedWrite(mutation: entry.mutation, error: error))
                    }
                }
                for (path, version) in cached {
                    if Self.keepInBase(path, version: version, in: &state, change: &change, now: now) { changed.append(path) }
                }
                let write = settlement.decisions.isEmpty ? nil
                    : state.persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.listener.resumeVersion)
                let undecided = Self.refreshModels(changed, in: &state)
                let (action, retry) = Self.take(state.sender.proceed(outbox: state.view.outbox, now: elapsed(), random: random), in: &state)
                if !rejectedNow.isEmpty { self.rejected.withLock { $0 += rejectedNow } }
                return (settlement, write, undecided, action, retry, refetched)
            }
            // The server's answers: written behind the sender, which goes on with the next window.
            if let write { storeLater(write) }
            installModels(undecided)
            let refused = settlement.decisions.filter { if case .rejected = $0.decision { return true } else { return false } }
            if !settlement.decisions.isEmpty {
                notifyChanged(refused.isEmpty ? [.documents, .pendingWrites] : [.documents, .pendingWrites, .rejectedWrites])
            }
            for case (let entry, .rejected(let error)) in refused {
                log("writeRejected", ["document_id": entry.path.id, "error_description": error.message], severity: .severe)
                metrics?.rejected(error)
            }
            let (failures, isOffline, isShutDown, outboxEmpty) = state.access {
                ($0.sender.failures, $0.sender.isOffline, $0.tasks.isShutDown, $0.view.outbox.isEmpty)
            }
            if let failure = settlement.failure {
                var parameters: [String: any Sendable] = ["error_description": "\(failure)", "retry_count": failures, "pending_write_count": pendingWriteCount]
                if case .sleep(let deadline) = action {
                    parameters["delay_seconds"] = (deadline - elapsed()).doubleSeconds
                    log("syncPendingWrites_retrying", parameters, severity: .warning)
                } else if isOffline {
                    // No backoff: the writes go when the remote's connection is back.
                    log("syncPendingWrites_offline", parameters, severity: .warning)
                } else {
                    log("syncPendingWrites_retrying", parameters, severity: .warning)
                }
            }
            settlement.resumed.forEach { $0.resume(returning: $1) }
            if !refetched.isEmpty { refetch(refetched) }
            if case .send(let next) = action, !isShutDown {
                // The next window goes from the task that sent this one.
                retry?.cancel()
                return next
            }
            run(action, cancelling: retry)
            if case .none = action {
                if outboxEmpty { log("pendingWritesCleared") }
                log("syncPendingWrites_complete", ["pending_write_count": pendingWriteCount])
            }
            return nil
        }
    }

    /// Records in `change` the base's document at `path` after the server answered for it outside
    /// the listener. One the listened query excludes leaves the base, as the server would not list
    /// it: its listener would never keep it current.
    /// Returns whether the view changed (the document left it).
    @discardableResult
    private static func keepInBase(_ path: DocumentPath, version: Version, in state: inout State, change: inout LocalCollectionChange, now: Date) -> Bool {
        if let document = state.view.base[path], state.queryView?.admits(document) == false, !state.view.hasPendingWrites(path) {
            change.deletions.append(path)
            return state.view.setBase(nil, at: path, version: version, now: now)
        } else if let document = state.view.base[path] {
            change.upserts.append(document)
        } else {
            change.deletions.append(path)
        }
        return false
    }

    /// Reads again the documents whose writes were answered `unknown`, and takes the server's
    /// state of each into the base (unless the listener brought a newer one meanwhile).
    private func refetch(_ documents: [(DocumentPath, Version)]) {
        guard let refetch else { return }
        Task { [weak self] in
            for (path, answered) in documents {
                do {
                    let document = try await refetch(path)
                    await self?.takeFetched(path, document, version: document?.version ?? answered)
                } catch {
                    self?.log("refetch_fail", ["document_id": path.id, "error_description": "\(error)"], severity: .warning)
                }
            }
        }
    }

    private func takeFetched(_ path: DocumentPath, _ document: Document?, version: Version) async {
        var prepared = PreparedModels()
        if let document { prepared.add([RemoteChange(path: path, document: document, version: version)]) }
        let ready = prepared
        await queue.run { [self] in
            let (write, undecided) = state.access { state -> (LocalWrite?, [Document]) in
                let now = Date()
                if let current = state.view.base[path], current.version > version { return (nil, []) }
                state.view.setBase(document, at: path, version: version, now: now)
                var change = LocalCollectionChange()
                Self.keepInBase(path, version: version, in: &state, change: &change, now: now)
                let write = state.persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.listener.resumeVersion)
                return (write, Self.refreshModels([path], in: &state, prepared: ready))
            }
            if let write { store(write) }
            installModels(undecided)
            notifyChanged([.documents])
        }
        for (path, error) in prepared.failures { logDecodeFailure(path, error) }
        log("refetch_success", ["document_id": path.id])
    }
}

extension LocalView {
    /// Puts back the newest entry as it was before a merge that could not be stored.
    mutating func restoreLast(_ entry: PendingWrite, now: Date) {
        removeEntry(entry.id, now: now)
        var outbox = self.outbox
        var entries = Array(outbox.entries)
        entries.append(entry)
        outbox = Outbox(clientID: outbox.clientID, entries: entries, nextSequence: outbox.nextSequence)
        self = LocalView(base: Array(base.values), outbox: outbox, now: now)
    }
}
