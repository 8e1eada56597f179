import Synchronization
import TandemCore

/// Lets concurrent writers share one durable commit: the first writer to find the queue idle starts
/// a drain, which takes every request queued so far, processes them together, answers each, and
/// repeats until the queue is empty. Writers that arrive during a commit wait for the next one.
///
/// The drain runs where commits are made (the store's database writer), not on Swift's cooperative
/// threads: a drain that had to wait for a turn there between commits would leave the writer idle
/// while the writers it answered already queue again.
package final class GroupCommitQueue<Request: Sendable, Response: Sendable>: Sendable {
    private struct Entry: Sendable {
        var request: Request
        var ticket: Ticket<Response>
    }

    private struct State {
        var queue: [Entry] = []
        var draining = false
        /// Someone was told the drain would report again (``promiseReport()``).
        var promised = false
    }

    private let state = Mutex(State())

    package init() {}

    /// Queues a request and waits for its answer. When no drain is running, `startDrain` is called
    /// to start one; it must arrange for `drain(_:)` to run soon, off the caller's task. Cancelling
    /// one writer never fails the others sharing its commit.
    package func submit(_ request: Request, startDrain: () -> Void) async throws -> Response {
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

    /// Whether a drain is running (or about to): true promises that the drain reports once more
    /// after this call — `process` is then called with `mustReport` set, or, if no group is left,
    /// `idle` — so whoever waits for that report is never left waiting.
    package func promiseReport() -> Bool {
        state.withLock { state in
            guard state.draining else { return false }
            state.promised = true
            return true
        }
    }

    /// Commits the queued requests group by group until the queue is empty. `process` commits a
    /// group and answers each request, in order; `mustReport` says a report was promised (see
    /// ``promiseReport()``), which `process` must make even if its group changes nothing or fails.
    /// `idle` is called when the queue is empty and a promised report is still owed.
    package func drain(_ process: (_ requests: [Request], _ mustReport: Bool) -> [Result<Response, any Error>], idle: () -> Void = {}) {
        while let (entries, mustReport) = nextGroup(idle: idle) {
            answer(entries, process(entries.map(\.request), mustReport))
        }
    }

    /// As above, for a store whose commits suspend (a database reached over the network): run it
    /// in a task of its own (`startDrain`), which commits group after group.
    package func drain(_ process: (_ requests: [Request], _ mustReport: Bool) async -> [Result<Response, any Error>], idle: () -> Void = {}) async {
        while let (entries, mustReport) = nextGroup(idle: idle) {
            answer(entries, await process(entries.map(\.request), mustReport))
        }
    }

    /// The requests queued so far, taken from the queue, and whether a report is owed; nil when
    /// none are left (the drain ends, after `idle` if a report is owed).
    private func nextGroup(idle: () -> Void) -> ([Entry], Bool)? {
        let (entries, mustReport) = state.withLock { state -> ([Entry], Bool) in
            let promised = state.promised
            state.promised = false
            if state.queue.isEmpty {
                state.draining = false
                return ([], promised)
            }
            defer { state.queue.removeAll(keepingCapacity: true) }
            return (state.queue, promised)
        }
        if entries.isEmpty {
            if mustReport { idle() }
            return nil
        }
        return (entries, mustReport)
    }

    private func answer(_ entries: [Entry], _ results: [Result<Response, any Error>]) {
        for (entry, result) in zip(entries, results) {
            entry.ticket.fulfill(result)
        }
    }
}
