import Synchronization

/// Lets concurrent writers share one durable commit: the first writer to find the queue idle starts
/// a drain, which takes every request queued so far, processes them together, answers each, and
/// repeats until the queue is empty. Writers that arrive during a commit wait for the next one.
///
/// The drain runs where commits are made (the store's database writer), not on Swift's cooperative
/// threads: a drain that had to wait for a turn there between commits would leave the writer idle
/// while the writers it answered already queue again.
final class GroupCommitQueue<Request: Sendable, Response: Sendable>: Sendable {
    private struct Entry: Sendable {
        var request: Request
        var ticket: Ticket<Response>
    }

    private struct State {
        var queue: [Entry] = []
        var draining = false
    }

    private let state = Mutex(State())

    init() {}

    /// Queues a request and waits for its answer. When no drain is running, `startDrain` is called
    /// to start one; it must arrange for `drain(_:)` to run soon, off the caller's task. Cancelling
    /// one writer never fails the others sharing its commit.
    func submit(_ request: Request, startDrain: () -> Void) async throws -> Response {
        let ticket = Ticket<Response>()
        let start = state.withLock { state -> Bool in
            state.queue.append(Entry(request: request, ticket: ticket))
            if state.draining { return false }
            state.draining = true
            return true
        }
        if start { startDrain() }
        return try await ticket.value()
    }

    /// Commits the queued requests group by group until the queue is empty. `process` commits a
    /// group and answers each request, in order.
    func drain(_ process: ([Request]) -> [Result<Response, any Error>]) {
        while true {
            let entries = state.withLock { state -> [Entry] in
                if state.queue.isEmpty {
                    state.draining = false
                    return []
                }
                defer { state.queue.removeAll(keepingCapacity: true) }
                return state.queue
            }
            if entries.isEmpty { return }
            let results = process(entries.map(\.request))
            for (entry, result) in zip(entries, results) {
                entry.ticket.fulfill(result)
            }
        }
    }
}

/// A one-shot answer that may arrive before or after someone waits for it; the first answer stays.
package final class Ticket<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<Value, any Error>)
        case done(Result<Value, any Error>)
    }

    private let state = Mutex(State.empty)

    package init() {}

    package func value() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<Value, any Error>? in
                if case .done(let result) = state { return result }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    package func fulfill(_ result: Result<Value, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, any Error>? in
            switch state {
            case .done:
                return nil
            case .waiting(let continuation):
                state = .done(result)
                return continuation
            case .empty:
                state = .done(result)
                return nil
            }
        }
        // Never resume a continuation while holding a lock.
        waiter?.resume(with: result)
    }
}
