import Synchronization
import TandemCore

/// Whoever waits for a write's outcome: a caller suspended in an engine's `write`, or the ticket a
/// synchronous caller was given when it queued the write (synced state queues each edit in the
/// order it was made, without waiting for it).
enum WriteWaiter: Sendable {
    case continuation(CheckedContinuation<WriteOutcome, Never>)
    case ticket(WriteTicket)

    func resume(returning outcome: WriteOutcome) {
        switch self {
        case .continuation(let continuation): continuation.resume(returning: outcome)
        case .ticket(let ticket): ticket.resolve(outcome)
        }
    }
}

/// A write queued on an engine's executor by a caller that does not wait for it: whether it is in
/// the engine's view and outbox yet (``isRecorded``), and its outcome, for whoever awaits it.
final class WriteTicket: Sendable {
    private struct State {
        var recorded = false
        var outcome: WriteOutcome?
        var waiters: [CheckedContinuation<WriteOutcome, Never>] = []
        var recordWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Whether the engine has taken the write into its view and outbox (or refused to store it).
    var isRecorded: Bool { state.withLock { $0.recorded } }

    func markRecorded() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.recorded = true
            defer { state.recordWaiters = [] }
            return state.recordWaiters
        }
        waiters.forEach { $0.resume() }
    }

    /// Returns once the engine has taken the write (durably in its outbox), with the error that
    /// kept it from disk, if one did.
    func recorded() async -> (any Error)? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.recorded { return true }
                state.recordWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
        if case .notStored(let error)? = currentOutcome { return error }
        return nil
    }

    /// The outcome as known now, if any.
    var currentOutcome: WriteOutcome? { state.withLock { $0.outcome } }

    /// The write's outcome, as ``SyncCore/write(_:event:parameters:)`` would return it.
    var outcome: WriteOutcome {
        get async {
            await withCheckedContinuation { continuation in
                let known = state.withLock { state -> WriteOutcome? in
                    if let outcome = state.outcome { return outcome }
                    state.waiters.append(continuation)
                    return nil
                }
                if let known { continuation.resume(returning: known) }
            }
        }
    }

    /// Tells the outcome to whoever awaits it (a write reported queued may later be answered: the
    /// newest outcome is the one later awaiters hear).
    func resolve(_ outcome: WriteOutcome) {
        let waiters = state.withLock { state -> [CheckedContinuation<WriteOutcome, Never>] in
            state.outcome = outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(returning: outcome) }
    }
}
