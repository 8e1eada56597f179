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
/// - A request is refused from its head alone, before anything reads its body, when it declares a
///   body over the request limit (413), comes from a web page ``SitePolicy`` refuses (403, 415,
///   421), asks to upgrade anywhere but the stream, or asks for a WebSocket version the server
///   does not speak (426, naming the one it does). The connection
///   closes after the answer; nothing after the refused head is served.
/// - A request that says `Connection: close` is the connection's last: it closes once answered.
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
        /// Answer with this status, error and extra headers, then close.
        case refuse(status: Int, TandemError, headers: [String: String] = [:])
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
        var headers: [String: String] = [:]
    }

    /// What the machine reads of a request's head.
    struct Head: Sendable, Equatable {
        /// The request target, as sent.
        var target: String
        /// The `Upgrade` header, if any.
        var upgrade: String?
        /// The `Sec-WebSocket-Version` header, if any.
        var webSocketVersion: String?
        /// Whether a `Sec-WebSocket-Key` header came.
        var hasWebSocketKey = false
        /// The declared `Content-Length`, if any.
        var contentLength: Int?
        /// Whether the request says `Connection: close`.
        var closesConnection = false
        /// The request's method, as sent.
        var method = "GET"
        /// The `Host` header, if any.
        var host: String?
        /// The `Origin` header, if any (browsers send it).
        var origin: String?
        /// The `Content-Type` header, if any.
        var contentType: String?
    }

    let timeouts: Timeouts
    /// The largest body a request may declare.
    let maximumBodyBytes: Int
    /// Which web pages may drive the server (``SitePolicy``).
    let sites: SitePolicy
    private var state: State
    /// The request being read or answered said `Connection: close`.
    private var closeWhenAnswered = false

    init(timeouts: Timeouts, maximumBodyBytes: Int = .max, sites: SitePolicy = SitePolicy(), now: Duration) {
        self.timeouts = timeouts
        self.maximumBodyBytes = maximumBodyBytes
        self.sites = sites
        state = .waiting(deadline: now + timeouts.idle)
    }

    /// The WebSocket version the server speaks.
    static let webSocketVersion = "13"

    /// Why a request must be refused from its head alone; nil when it may go on.
    func refusal(of head: Head, isStreamPath: (String) -> Bool) -> Refusal? {
        if let length = head.contentLength, length > maximumBodyBytes {
            return Refusal(status: 413, error: TandemError(.resourceExhausted, "The request declares a body of \(length) bytes; at most \(maximumBodyBytes) are allowed. Nothing was read; the connection is closed. Send smaller batches."))
        }
        if let refusal = sites.refusal(method: head.method, target: head.target, host: head.host, origin: head.origin,
                                       contentType: head.contentType, upgrades: head.upgrade != nil) {
            return refusal
        }
        guard let upgrade = head.upgrade else { return nil }
        guard upgrade.lowercased().contains("websocket") else {
            return Refusal(status: 400, error: TandemError(.invalidArgument, "This server upgrades to websocket only, not to '\(upgrade)'; the connection is closed. Send HTTP requests without an Upgrade header."))
        }
        guard isStreamPath(head.target) else {
            return Refusal(status: 400, error: TandemError(.invalidArgument, "Only /v1/stream upgrades to a WebSocket, not \(head.target.prefix(200)); the connection is closed. Send HTTP requests without an Upgrade header."))
        }
        guard let version = head.webSocketVersion, version.trimmingWhitespace == Self.webSocketVersion else {
            return Refusal(status: 426, error: TandemError(.failedPrecondition, "This server speaks WebSocket version \(Self.webSocketVersion) (RFC 6455) only\(head.webSocketVersion.map { ", not \($0.prefix(20))" } ?? ""); the connection is closed. Upgrade with Sec-WebSocket-Version: \(Self.webSocketVersion)."),
                           headers: ["Sec-WebSocket-Version": Self.webSocketVersion])
        }
        guard head.hasWebSocketKey else {
            return Refusal(status: 400, error: TandemError(.invalidArgument, "A WebSocket upgrade needs a Sec-WebSocket-Key header; the connection is closed."))
        }
        return nil
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

    /// A request head arrived; `refusal` is what ``refusal(of:isStreamPath:)`` found wrong with it.
    mutating func headArrived(now: Duration, closesConnection: Bool = false, refusal: Refusal? = nil) -> Action {
        if let refusal {
            switch state {
            case .done:
                return .none
            case .responding:
                // Behind a request still being answered: refused once that answer is written.
                state = .responding(then: refusal)
                return .none
            case .waiting, .readingHead, .readingBody:
                state = .done
                return .refuse(status: refusal.status, refusal.error, headers: refusal.headers)
            }
        }
        if closesConnection { closeWhenAnswered = true }
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
        if answered {
            if closeWhenAnswered {
                state = .done
                return .close
            }
            return wait(now: now)
        }
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
                return .refuse(status: refusal.status, refusal.error, headers: refusal.headers)
            }
            if closeWhenAnswered {
                state = .done
                return .close
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

extension StringProtocol {
    /// The string without leading and trailing spaces and tabs.
    var trimmingWhitespace: Substring {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}
