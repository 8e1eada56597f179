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
        // sender takes entries inside `serial`, so it never sees one that is not durable yet.
        let path = mutation.path
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<WriteOutcome, Never>) in
            let enqueued = serial.withLock { _ -> Result<Int, any Error> in
                // What the view will show, decoded before the locked step.
                let now = Date()
                let shown = LocalView.applyLocally(mutation, to: state.withLock { $0.view.documents[path] }, now: now)
                let prepared = PreparedModels(showing: shown.map { [$0] } ?? [])
                let (result, previousLast, write, undecided, pendingCount) = state.withLock { state in
                    let previousLast = state.view.outbox.entries.last
                    let result = state.view.enqueue(mutation, now: now)
                    var change = LocalCollectionChange()
                    change.outboxPuts = [result.entry]
                    change.nextSequence = state.view.outbox.nextSequence
                    let undecided = Self.refreshModels([path], in: &state, prepared: prepared)
                    state.waiters[result.entry.id, default: []].append(continuation)
                    let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                    return (result, previousLast, write, undecided, state.view.outbox.count)
                }
                for (path, error) in prepared.failures { logDecodeFailure(path, error) }
                do {
                    try write.run()
                } catch {
                    // Not durable, so not accepted: undo it in memory too.
                    let undone = state.withLock { state -> [Document] in
                        state.waiters[result.entry.id]?.removeLast()
                        if state.waiters[result.entry.id]?.isEmpty == true { state.waiters[result.entry.id] = nil }
                        switch result {
                        case .appended(let entry): state.view.removeEntry(entry.id, now: now)
                        case .merged: state.view.restoreLast(previousLast!, now: now)
                        }
                        return Self.refreshModels([path], in: &state)
                    }
                    installModels(undone)
                    return .failure(error)
                }
                installModels(undecided)
                return .success(pendingCount)
            }
            announce(enqueued, continuation, ["document_id": mutation.path.id])
        }
        try report(outcome, event: event, parameters)
        return outcome
    }

    /// After a write's locked steps: answers one that could not be stored, or tells observers of
    /// the queued one and starts the sender.
    private func announce(_ enqueued: Result<Int, any Error>, _ continuation: CheckedContinuation<WriteOutcome, Never>, _ parameters: [String: any Sendable]) {
        switch enqueued {
        case .failure(let error):
            continuation.resume(returning: .notStored(error))
        case .success(let pendingCount):
            notifyChanged([.documents, .pendingWrites])
            log("pendingWriteAdded", parameters.merging(["pending_write_count": pendingCount]) { $1 })
            triggerFlush()
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
        let paths = mutations.map(\.path)
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<WriteOutcome, Never>) in
            let enqueued = serial.withLock { _ -> Result<Int, any Error> in
                // What the view will show of each document, decoded before the locked step.
                let now = Date()
                var shown = state.withLock { state in Dictionary(paths.map { ($0, state.view.documents[$0]) }) { first, _ in first } }
                for mutation in mutations {
                    shown[mutation.path] = .some(LocalView.applyLocally(mutation, to: shown[mutation.path] ?? nil, now: now))
                }
                let prepared = PreparedModels(showing: shown.values.compactMap { $0 })
                let (added, write, undecided, pendingCount) = state.withLock { state in
                    let added = state.view.enqueue(batch: mutations, now: now)
                    var change = LocalCollectionChange()
                    change.outboxPuts = added
                    change.nextSequence = state.view.outbox.nextSequence
                    let undecided = Self.refreshModels(paths, in: &state, prepared: prepared)
                    // Every write of the batch is answered together; its first one carries the waiter.
                    state.waiters[added[0].id, default: []].append(continuation)
                    let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                    return (added, write, undecided, state.view.outbox.count)
                }
                for (path, error) in prepared.failures { logDecodeFailure(path, error) }
                do {
                    try write.run()
                } catch {
                    // Not durable, so not accepted: none of it stays.
                    let undone = state.withLock { state -> [Document] in
                        state.waiters[added[0].id] = nil
                        for entry in added.reversed() { state.view.removeEntry(entry.id, now: now) }
                        return Self.refreshModels(paths, in: &state)
                    }
                    installModels(undone)
                    return .failure(error)
                }
                installModels(undecided)
                return .success(pendingCount)
            }
            announce(enqueued, continuation, ["write_count": mutations.count])
        }
        try report(outcome, event: "batch", ["write_count": mutations.count])
        return outcome
    }

    /// Starts the sender unless it is running. Any write, read or reconnect calls this. With
    /// `retryIfRunning` (a reconnection), a send under way that then fails is retried at once: it
    /// may have failed on the connection that was just replaced.
    func triggerFlush(retryIfRunning: Bool = false) {
        let start = state.withLock { state -> Bool in
            if state.flushing {
                if retryIfRunning { state.flushAfterFailure = true }
                return false
            }
            state.flushAfterFailure = false
            if state.view.outbox.isEmpty { return false }
            state.flushing = true
            state.flushRetry?.cancel()
            state.flushRetry = nil
            return true
        }
        if start {
            Task { await self.flush() }
        }
    }

    /// Sends the outbox in order, one write at a time, until it is empty or a transient failure
    /// stops it (then a retry is scheduled with backoff).
    func flush() async {
        log("syncPendingWrites_start", ["pending_write_count": pendingWriteCount])
        while true {
            // Mark the first entry as sent before sending: once sent it is never merged. In memory
            // only: entries loaded from disk all count as sent. Inside `serial`, so the entry taken
            // is durable.
            let next: [PendingWrite] = serial.withLock { _ in
                state.withLock { state in
                    // Copied out before marking: a slice still held would make the marking copy the
                    // whole outbox.
                    var request = Array(state.view.outbox.request(startingAt: state.view.outbox.entries.startIndex))
                    if request.isEmpty { state.flushing = false }
                    for index in request.indices {
                        state.view.markAttempted(request[index].id)
                        request[index].attempts += 1
                    }
                    return request
                }
            }
            guard !next.isEmpty else { break }
            do {
                let acknowledgements = try await commit(next.map(\.mutation))
                acknowledged(next.map { entry in
                    let acknowledgement = acknowledgements.first { $0.id == entry.id }
                        ?? WriteAcknowledgement(id: entry.id, status: .unknown, version: acknowledgements.last?.version ?? .zero)
                    return (entry, acknowledgement)
                })
            } catch let error where TandemError.isPermanent(error) {
                rejected(next, error as! TandemError)
            } catch {
                transientFailure(error)
                return
            }
        }
        let cleared = state.withLock { $0.view.outbox.isEmpty }
        if cleared { log("pendingWritesCleared") }
        log("syncPendingWrites_complete", ["pending_write_count": pendingWriteCount])
    }

    /// Records the answers to one request (a write, or a batch's writes) in one locked step.
    private func acknowledged(_ answered: [(PendingWrite, WriteAcknowledgement)]) {
        // The server's documents, decoded before the locked step: the view shows each when no
        // other write to it is pending.
        var prepared = PreparedModels()
        for (entry, acknowledgement) in answered {
            if let document = acknowledgement.document {
                prepared.add([RemoteChange(path: entry.path, document: document, version: document.version)])
            }
        }
        let waiters = serial.withLock { _ -> [(CheckedContinuation<WriteOutcome, Never>, WriteAcknowledgement)] in
            let (write, undecided, waiters) = state.withLock { state in
                state.flushFailures = 0
                var change = LocalCollectionChange()
                var waiters: [(CheckedContinuation<WriteOutcome, Never>, WriteAcknowledgement)] = []
                for (entry, acknowledgement) in answered {
                    Self.acknowledge(entry, acknowledgement, in: &state, change: &change)
                    for waiter in state.waiters.removeValue(forKey: entry.id) ?? [] { waiters.append((waiter, acknowledgement)) }
                }
                let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                let undecided = Self.refreshModels(answered.map(\.0.path), in: &state, prepared: prepared)
                return (write, undecided, waiters)
            }
            store(write)
            installModels(undecided)
            return waiters
        }
        for (path, error) in prepared.failures { logDecodeFailure(path, error) }
        notifyChanged([.documents, .pendingWrites])
        waiters.forEach { $0.resume(returning: .acknowledged($1)) }
    }

    /// One acknowledged write: out of the outbox, its result into the base (and `change`).
    private static func acknowledge(_ entry: PendingWrite, _ acknowledgement: WriteAcknowledgement, in state: inout State, change: inout LocalCollectionChange) {
        change.outboxRemovals.append(entry.id)
        if acknowledgement.status == .unknown {
            // Decided so long ago that the server no longer knows the answer: the write leaves
            // the outbox and the view falls back to the server's state, which the listener
            // keeps current; nothing is assumed deleted.
            state.view.removeEntry(entry.id, now: Date())
        } else {
            let now = Date()
            state.view.acknowledge(entry, result: acknowledgement.document, version: acknowledgement.version, now: now)
            if let document = acknowledgement.document, state.queryView?.admits(document) == false,
               state.view.base[entry.path] == document, !state.view.hasPendingWrites(entry.path) {
                // The server's document is outside the listened query, whose listener
                // will not keep it current: it is not cached, as the server would not list it.
                state.view.setBase(nil, at: entry.path, version: acknowledgement.version, now: now)
                change.deletions.append(entry.path)
            } else if let document = acknowledgement.document {
                change.upserts.append(document)
            } else {
                change.deletions.append(entry.path)
            }
        }
    }

    /// A request refused for good: every write of it leaves the outbox and the view, together.
    private func rejected(_ entries: [PendingWrite], _ error: TandemError) {
        let waiters = serial.withLock { _ -> [CheckedContinuation<WriteOutcome, Never>] in
            let (write, undecided, waiters) = state.withLock { state in
                var change = LocalCollectionChange()
                var waiters: [CheckedContinuation<WriteOutcome, Never>] = []
                for entry in entries {
                    state.view.removeEntry(entry.id, now: Date())
                    state.rejected.append(RejectedWrite(mutation: entry.mutation, error: error))
                    change.outboxRemovals.append(entry.id)
                    waiters += state.waiters.removeValue(forKey: entry.id) ?? []
                }
                let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                let undecided = Self.refreshModels(entries.map(\.path), in: &state)
                return (write, undecided, waiters)
            }
            store(write)
            installModels(undecided)
            return waiters
        }
        notifyChanged([.documents, .pendingWrites, .rejectedWrites])
        for entry in entries {
            log("writeRejected", ["document_id": entry.path.id, "error_description": error.message], severity: .severe)
        }
        waiters.forEach { $0.resume(returning: .rejected(error)) }
    }

    private func transientFailure(_ error: any Error) {
        let (waiters, failures, again) = state.withLock { state -> ([CheckedContinuation<WriteOutcome, Never>], Int, Bool) in
            state.flushing = false
            state.flushFailures += 1
            let waiters = state.waiters.values.flatMap { $0 }
            state.waiters.removeAll()
            defer { state.flushAfterFailure = false }
            return (waiters, state.flushFailures, state.flushAfterFailure)
        }
        waiters.forEach { $0.resume(returning: .queued) }
        if again {
            triggerFlush()
            return
        }
        guard let delay = retryDelay(afterFailures: failures) else { return }
        log("syncPendingWrites_retrying", [
            "error_description": "\(error)", "retry_count": failures, "delay_seconds": delay.doubleSeconds,
            "pending_write_count": pendingWriteCount,
        ], severity: .warning)
        let retry = Task { [clock] in
            do {
                try await clock.sleep(for: delay)
            } catch {
                return
            }
            self.triggerFlush()
        }
        state.withLock { state in
            if state.flushing { retry.cancel() } else { state.flushRetry = retry }
        }
    }
}

extension LocalCollectionChange {
    /// Records a document's new state; the last one recorded for a path wins.
    mutating func upsert(_ document: Document) {
        deletions.removeAll { $0 == document.path }
        upserts.removeAll { $0.path == document.path }
        upserts.append(document)
    }

    mutating func delete(_ path: DocumentPath) {
        upserts.removeAll { $0.path == path }
        deletions.removeAll { $0 == path }
        deletions.append(path)
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
