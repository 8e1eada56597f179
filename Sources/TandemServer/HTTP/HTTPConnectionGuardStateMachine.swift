import TandemCore

/// The deadlines and refusals of one HTTP connection, as a pure state machine: events in, actions
/// out, times as points on the server's clock.
///
/// - A connection with no request under way (new, or between keep-alive requests) is closed after
///   `idle`.
/// - Once a request's first bytes arrive, its head must be complete within `head`, and its body
///   within `body` of the head; past either it is answered 408 and closed.
/// - A request that is not valid HTTP/1.1 is answered with a status and the JSON error shape and
///   closed, since nothing after it can be read; if the response to an earlier request is still
///   being written, the answer follows it.
/// - A WebSocket upgrade leaves HTTP once it is granted — when a `101 Switching Protocols` head is
///   written — and the guard steps aside (the stream has its own watchdog). An upgrade request that
///   is refused is an HTTP request like any other, its connection guarded as before: asking for an
///   upgrade never buys a connection freedom from the timeouts.
struct HTTPConnectionGuardStateMachine: Sendable {
    struct Timeouts: Sendable, Hashable {
        var idle: Duration
        var head: Duration
        var body: Duration
    }

    enum Action: Sendable, Equatable {
        /// Nothing to do.
        case none
        /// (Re)arm the one timer for this point on the clock.
        case wake(at: Duration)
        /// Answer with this status and error, then close.
        case refuse(status: Int, TandemError)
        /// Close without an answer.
        case close
        /// Stop guarding this connection (it became a WebSocket).
        case stepAside
    }

    private enum State: Sendable, Equatable {
        case waiting(deadline: Duration)
        case readingHead(deadline: Duration)
        case readingBody(deadline: Duration, answered: Bool)
        case responding(then: Refusal?)
        case done
    }

    struct Refusal: Sendable, Equatable {
        var status: Int
        var error: TandemError
    }

    let timeouts: Timeouts
    private var state: State

    init(timeouts: Timeouts, now: Duration) {
        self.timeouts = timeouts
        state = .waiting(deadline: now + timeouts.idle)
    }

    /// The deadline to arm when the connection opens.
    var firstWake: Action {
        if case .waiting(let deadline) = state { return .wake(at: deadline) }
        return .none
    }

    /// Bytes arrived (a read finished) without completing a head.
    mutating func bytesArrived(now: Duration) -> Action {
        guard case .waiting = state else { return .none }
        let deadline = now + timeouts.head
        state = .readingHead(deadline: deadline)
        return .wake(at: deadline)
    }

    /// A request head arrived.
    mutating func headArrived(now: Duration) -> Action {
        switch state {
        case .waiting, .readingHead:
            let deadline = now + timeouts.body
            state = .readingBody(deadline: deadline, answered: false)
            return .wake(at: deadline)
        case .readingBody, .responding, .done:
            // A pipelined request behind one still being answered: its head came whole.
            return .none
        }
    }

    /// The request's last part arrived.
    mutating func requestEnded(now: Duration) -> Action {
        guard case .readingBody(_, let answered) = state else { return .none }
        if answered { return wait(now: now) }
        state = .responding(then: nil)
        return .none
    }

    /// A response head with this status is being written.
    mutating func responseHeadWritten(status: Int) -> Action {
        // Switching protocols: what follows on the connection is no longer HTTP.
        guard status == 101 else { return .none }
        state = .done
        return .stepAside
    }

    /// The response's last part was written.
    mutating func responseEnded(now: Duration) -> Action {
        switch state {
        case .responding(let refusal):
            if let refusal {
                state = .done
                return .refuse(status: refusal.status, refusal.error)
            }
            return wait(now: now)
        case .readingBody(let deadline, _):
            // Answered before the whole body came (a refusal): the rest is still read, on time.
            state = .readingBody(deadline: deadline, answered: true)
            return .none
        case .waiting, .readingHead, .done:
            return .none
        }
    }

    /// The request could not be parsed.
    mutating func parseFailed(status: Int, _ error: TandemError) -> Action {
        switch state {
        case .responding:
            state = .responding(then: Refusal(status: status, error: error))
            return .none
        case .done:
            return .none
        case .waiting, .readingHead, .readingBody:
            state = .done
            return .refuse(status: status, error)
        }
    }

    /// The timer fired at `now`.
    mutating func timerFired(now: Duration) -> Action {
        switch state {
        case .waiting(let deadline):
            guard now >= deadline else { return .wake(at: deadline) }
            state = .done
            return .close
        case .readingHead(let deadline):
            guard now >= deadline else { return .wake(at: deadline) }
            state = .done
            return .refuse(status: 408, TandemError(.deadlineExceeded, "The request's head did not arrive whole within \(timeouts.head); the connection is closed. Send the request line and headers at once."))
        case .readingBody(let deadline, _):
            guard now >= deadline else { return .wake(at: deadline) }
            state = .done
            return .refuse(status: 408, TandemError(.deadlineExceeded, "The request's body did not arrive whole within \(timeouts.body) of its head; the connection is closed. Send the body at once, or smaller batches."))
        case .responding, .done:
            return .none
        }
    }

    private mutating func wait(now: Duration) -> Action {
        let deadline = now + timeouts.idle
        state = .waiting(deadline: deadline)
        return .wake(at: deadline)
    }
}
