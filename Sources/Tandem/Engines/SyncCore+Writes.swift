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
            switch enqueued {
            case .failure(let error):
                continuation.resume(returning: .notStored(error))
            case .success(let pendingCount):
                notifyChanged([.documents, .pendingWrites])
                log("pendingWriteAdded", ["document_id": mutation.path.id, "pending_write_count": pendingCount])
                triggerFlush()
            }
        }
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
            let next: PendingWrite? = serial.withLock { _ in
                state.withLock { state in
                    guard var entry = state.view.outbox.first else {
                        state.flushing = false
                        return nil
                    }
                    state.view.markAttempted(entry.id)
                    entry.attempts += 1
                    return entry
                }
            }
            guard let entry = next else { break }
            do {
                let acknowledgements = try await commit([entry.mutation])
                let acknowledgement = acknowledgements.first { $0.id == entry.id }
                    ?? WriteAcknowledgement(id: entry.id, status: .unknown, version: acknowledgements.last?.version ?? .zero)
                acknowledged(entry, acknowledgement)
            } catch let error where TandemError.isPermanent(error) {
                rejected(entry, error as! TandemError)
            } catch {
                transientFailure(error)
                return
            }
        }
        let cleared = state.withLock { $0.view.outbox.isEmpty }
        if cleared { log("pendingWritesCleared") }
        log("syncPendingWrites_complete", ["pending_write_count": pendingWriteCount])
    }

    private func acknowledged(_ entry: PendingWrite, _ acknowledgement: WriteAcknowledgement) {
        // The server's document, decoded before the locked step: the view shows it when no other
        // write to it is pending.
        var prepared = PreparedModels()
        if let document = acknowledgement.document {
            prepared.add([RemoteChange(path: entry.path, document: document, version: document.version)])
        }
        let waiters = serial.withLock { _ -> [CheckedContinuation<WriteOutcome, Never>] in
            let (write, undecided, waiters) = state.withLock { state in
                state.flushFailures = 0
                var change = LocalCollectionChange()
                change.outboxRemovals = [entry.id]
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
                        change.deletions = [entry.path]
                    } else if let document = acknowledgement.document {
                        change.upserts = [document]
                    } else {
                        change.deletions = [entry.path]
                    }
                }
                let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                let undecided = Self.refreshModels([entry.path], in: &state, prepared: prepared)
                return (write, undecided, state.waiters.removeValue(forKey: entry.id) ?? [])
            }
            store(write)
            installModels(undecided)
            return waiters
        }
        for (path, error) in prepared.failures { logDecodeFailure(path, error) }
        notifyChanged([.documents, .pendingWrites])
        waiters.forEach { $0.resume(returning: .acknowledged(acknowledgement)) }
    }

    private func rejected(_ entry: PendingWrite, _ error: TandemError) {
        let waiters = serial.withLock { _ -> [CheckedContinuation<WriteOutcome, Never>] in
            let (write, undecided, waiters) = state.withLock { state in
                state.view.removeEntry(entry.id, now: Date())
                state.rejected.append(RejectedWrite(mutation: entry.mutation, error: error))
                var change = LocalCollectionChange()
                change.outboxRemovals = [entry.id]
                let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                let undecided = Self.refreshModels([entry.path], in: &state)
                return (write, undecided, state.waiters.removeValue(forKey: entry.id) ?? [])
            }
            store(write)
            installModels(undecided)
            return waiters
        }
        notifyChanged([.documents, .pendingWrites, .rejectedWrites])
        log("writeRejected", ["document_id": entry.path.id, "error_description": error.message], severity: .severe)
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
