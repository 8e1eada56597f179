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
        // could otherwise send and acknowledge the entry before anyone waits for its answer.
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<WriteOutcome, Never>) in
            let enqueued = state.withLock { state -> Result<Int, any Error> in
                let previousLast = state.view.outbox.entries.last
                let result = state.view.enqueue(mutation, now: Date())
                var change = LocalCollectionChange()
                change.outboxPuts = [result.entry]
                change.nextSequence = state.view.outbox.nextSequence
                do {
                    try persistence.persist(change, view: state.view, documentID: state.documentID, resumeVersion: state.resumeVersion)
                } catch {
                    // Not durable, so not accepted: undo it in memory too.
                    switch result {
                    case .appended(let entry): state.view.removeEntry(entry.id, now: Date())
                    case .merged: state.view.restoreLast(previousLast!, now: Date())
                    }
                    return .failure(error)
                }
                Self.refreshModels([mutation.path], in: &state)
                state.waiters[result.entry.id, default: []].append(continuation)
                return .success(state.view.outbox.count)
            }
            switch enqueued {
            case .failure(let error):
                continuation.resume(returning: .notStored(error))
            case .success(let pendingCount):
                notifyChanged()
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
            // Mark the first entry as sent before sending, durably: once sent it is never merged.
            let next: PendingWrite? = state.withLock { state in
                guard var entry = state.view.outbox.first else {
                    state.flushing = false
                    return nil
                }
                state.view.markAttempted(entry.id)
                entry.attempts += 1
                var change = LocalCollectionChange()
                change.outboxPuts = [entry]
                persist(change, in: &state, documentID: state.documentID, resumeVersion: state.resumeVersion)
                return entry
            }
            reportPersistFailures()
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
        let waiters = state.withLock { state -> [CheckedContinuation<WriteOutcome, Never>] in
            state.flushFailures = 0
            var change = LocalCollectionChange()
            change.outboxRemovals = [entry.id]
            if acknowledgement.status == .unknown {
                // Decided so long ago that the server no longer knows the answer: the write leaves
                // the outbox and the view falls back to the server's state, which the listener
                // keeps current; nothing is assumed deleted.
                state.view.removeEntry(entry.id, now: Date())
            } else {
                state.view.acknowledge(entry, result: acknowledgement.document, version: acknowledgement.version, now: Date())
                if let document = acknowledgement.document {
                    change.upserts = [document]
                } else {
                    change.deletions = [entry.path]
                }
            }
            persist(change, in: &state, documentID: state.documentID, resumeVersion: state.resumeVersion)
            Self.refreshModels([entry.path], in: &state)
            return state.waiters.removeValue(forKey: entry.id) ?? []
        }
        reportPersistFailures()
        notifyChanged()
        waiters.forEach { $0.resume(returning: .acknowledged(acknowledgement)) }
    }

    private func rejected(_ entry: PendingWrite, _ error: TandemError) {
        let waiters = state.withLock { state -> [CheckedContinuation<WriteOutcome, Never>] in
            state.view.removeEntry(entry.id, now: Date())
            state.rejected.append(RejectedWrite(mutation: entry.mutation, error: error))
            var change = LocalCollectionChange()
            change.outboxRemovals = [entry.id]
            persist(change, in: &state, documentID: state.documentID, resumeVersion: state.resumeVersion)
            Self.refreshModels([entry.path], in: &state)
            return state.waiters.removeValue(forKey: entry.id) ?? []
        }
        reportPersistFailures()
        notifyChanged()
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
