/// A ``TandemClient``'s connection as a pure state machine: when to connect, hello and welcome,
/// the heartbeat deadline, the reconnect backoff, and when every listener resumes. Events in,
/// actions out; it does no I/O and reads no clock: times are durations elapsed on the client's
/// clock, passed in by the shell (``TandemClient/run()``) that runs its actions.
///
/// Each socket is an *attempt* with its own number; events name theirs, so a late event of a
/// socket that was replaced changes nothing.
///
/// ```
///  offline ◀─setOnline(false)─ (any) ─setOnline(true)─▶ connecting
///
///  connecting ──opened──▶ open ──welcome──▶ connected
///      ▲                   │                   │
///      │                closed              closed / heartbeats missed → closing → closed
///      │                   ▼                   ▼
///      └──sleep ended── waiting(until) ◀── (a welcomed socket reconnects at once)
///
///  an attempt whose socket has not opened within the connect timeout ──▶ as if closed
/// ```
///
/// While an attempt is under way (connecting, open, or a welcomed socket closing with the client
/// online), requests wait for its outcome rather than fail at once (``isConnecting``).
struct ConnectionStateMachine: Sendable {
    enum Phase: Equatable, Sendable {
        /// Told to stay offline: no socket, no attempt, until ``setOnline(_:)`` says otherwise.
        case offline
        /// A socket is being opened.
        case connecting(attempt: Int)
        /// The socket is open and hello sent; the server has not said welcome yet.
        case open(attempt: Int)
        /// The server said welcome: requests may go.
        case connected(attempt: Int)
        /// The socket is being closed (gone silent, misbehaved, or going offline); `welcomed` says
        /// whether the server had said welcome on it.
        case closing(attempt: Int, welcomed: Bool)
        /// Between attempts, until `until` (elapsed time), or sooner when `woken`.
        case waiting(until: Duration, woken: Bool)
        /// Stopped for good.
        case stopped
        /// The reconnect policy gave up.
        case gaveUp
    }

    enum Action: Equatable, Sendable {
        /// Open a socket for `attempt`.
        case connect(attempt: Int)
        /// Send hello on the open socket.
        case sendHello
        /// Send a heartbeat.
        case sendHeartbeat
        /// Close the socket of `attempt` (gone silent, offline, or stopping).
        case close(attempt: Int)
        /// Welcome: send every listener's `listen` from its last version, wake whoever waits for
        /// the connection, and tell the engines.
        case resumeListeners
        /// The socket went: fail the requests waiting on it, and the listeners that fail then.
        case failPending
        /// Sleep until `until` (elapsed time), then send ``ConnectionStateMachine/sleepEnded(now:)``.
        case sleep(until: Duration, failures: Int)
        /// End the sleep now: a request or `setOnline(true)` wants an attempt.
        case endSleep
        /// The policy gave up after `failures` attempts in a row.
        case gaveUp(failures: Int)
    }

    let policy: RetryPolicy
    /// Heartbeat intervals that may pass without a word from the server.
    let missedHeartbeatsAllowed: Int
    private(set) var phase: Phase = .offline
    /// Failed attempts in a row.
    private(set) var failures = 0
    /// Heartbeat intervals since the server was last heard, on the socket in use.
    private(set) var silentIntervals = 0
    private var lastAttempt = 0
    private var online = true
    /// Whether the client runs: before ``start()`` nothing connects.
    private var running = false
    /// The credentials changed: the socket closing is replaced at once, not on the backoff.
    private var renewing = false
    /// Whether the socket of the attempt under way has opened (``opened(attempt:)``).
    private var socketOpened = false

    init(policy: RetryPolicy, missedHeartbeatsAllowed: Int) {
        self.policy = policy
        self.missedHeartbeatsAllowed = missedHeartbeatsAllowed
    }

    /// Whether the server said welcome on the socket in use, and the client is not going offline:
    /// requests may go.
    var isConnected: Bool {
        if online, case .connected = phase { return true }
        return false
    }

    /// Whether the client means to be connected: it runs, is online, and has not stopped or given
    /// up (it is connected, or on its way there).
    var wantsConnection: Bool { online && running && !isStopped }

    /// Whether an attempt is under way (a socket opening, or open and waiting for welcome) and the
    /// client is to stay online: a request now can wait for its outcome.
    var isConnecting: Bool {
        guard online else { return false }
        switch phase {
        case .connecting, .open, .closing: return true
        default: return false
        }
    }

    var isStopped: Bool { phase == .stopped || phase == .gaveUp }

    /// The socket in use, if any.
    var attempt: Int? {
        switch phase {
        case .connecting(let attempt), .open(let attempt), .connected(let attempt), .closing(let attempt, _): attempt
        case .offline, .waiting, .stopped, .gaveUp: nil
        }
    }

    // MARK: Events

    /// The client starts running.
    mutating func start() -> [Action] {
        guard !running, phase == .offline else { return [] }
        running = true
        return online ? [connect()] : []
    }

    /// The socket of `attempt` opened.
    mutating func opened(attempt: Int) -> [Action] {
        guard phase == .connecting(attempt: attempt) else { return [] }
        phase = .open(attempt: attempt)
        socketOpened = true
        silentIntervals = 0
        return [.sendHello]
    }

    /// The server said welcome on `attempt`.
    mutating func welcomed(attempt: Int) -> [Action] {
        guard phase == .open(attempt: attempt) else { return [] }
        phase = .connected(attempt: attempt)
        failures = 0
        return [.resumeListeners]
    }

    /// A message came from the server on `attempt`.
    mutating func heard(attempt: Int) {
        guard self.attempt == attempt else { return }
        silentIntervals = 0
    }

    /// A heartbeat interval passed on `attempt`: send a heartbeat, or close a socket that has
    /// been silent for too long.
    mutating func heartbeatDue(attempt: Int) -> [Action] {
        guard phase == .open(attempt: attempt) || phase == .connected(attempt: attempt) else { return [] }
        silentIntervals += 1
        if silentIntervals > missedHeartbeatsAllowed { return close(attempt) }
        return [.sendHeartbeat]
    }

    /// The server broke the protocol on `attempt` (a message the client must not trust): close.
    mutating func misbehaved(attempt: Int) -> [Action] {
        guard self.attempt == attempt else { return [] }
        if case .closing = phase { return [] }
        return close(attempt)
    }

    /// The socket of `attempt` closed, or could not open. A socket the server had welcomed
    /// reconnects at once; failed attempts back off by the policy. `now` is the elapsed time;
    /// `random` (0..<1) places the jitter.
    mutating func closed(attempt: Int, now: Duration, random: Double) -> [Action] {
        guard self.attempt == attempt else { return [] }
        let wasConnected: Bool
        switch phase {
        case .connected: wasConnected = true
        case .closing(_, let welcomed): wasConnected = welcomed
        default: wasConnected = false
        }
        guard online else {
            phase = .offline
            renewing = false
            return [.failPending]
        }
        if renewing {
            renewing = false
            failures = 0
            return [.failPending, connect()]
        }
        failures = wasConnected ? 0 : failures + 1
        guard let delay = policy.delay(afterFailures: failures, random: random) else {
            phase = .gaveUp
            return [.failPending, .gaveUp(failures: failures)]
        }
        if delay == .zero { return [.failPending, connect()] }
        phase = .waiting(until: now + delay, woken: false)
        return [.failPending, .sleep(until: now + delay, failures: failures)]
    }

    /// The socket of `attempt` has not opened within the connect timeout (a server, or something
    /// on the way, that takes the connection and never answers its upgrade): the attempt is given
    /// up as if it had closed, whether it was still opening or was being closed meanwhile. Its
    /// socket, should it open later, is closed at once (``opened(attempt:)`` no longer matches).
    mutating func connectTimedOut(attempt: Int, now: Duration, random: Double) -> [Action] {
        guard self.attempt == attempt, !socketOpened else { return [] }
        return closed(attempt: attempt, now: now, random: random)
    }

    /// The sleep between attempts ended: connect if it is due, or was woken.
    mutating func sleepEnded(now: Duration) -> [Action] {
        guard case .waiting(let until, let woken) = phase, woken || now >= until else { return [] }
        return [connect()]
    }

    /// A request (or a listener) needs the connection: a client waiting out its backoff tries now.
    mutating func wake() -> [Action] {
        guard case .waiting(let until, false) = phase else { return [] }
        phase = .waiting(until: until, woken: true)
        return [.endSleep]
    }

    /// The credentials changed (a sign-in or sign-out): the socket in use closes and another
    /// opens at once, saying hello with what the token provider gives now. Waiting out a backoff,
    /// the next attempt starts now; offline or not running, the next attempt asks anyway.
    mutating func renew() -> [Action] {
        guard running, online else { return [] }
        switch phase {
        case .connecting(let attempt), .open(let attempt), .connected(let attempt):
            renewing = true
            return close(attempt)
        case .closing:
            renewing = true
            return []
        case .waiting:
            return wake()
        case .offline, .stopped, .gaveUp:
            return []
        }
    }

    /// Online: connect (at once, when waiting). Offline: close the socket and stay away.
    mutating func setOnline(_ online: Bool) -> [Action] {
        self.online = online
        guard running else { return [] }
        if online {
            switch phase {
            case .offline: return [connect()]
            case .waiting: return wake()
            default: return []
            }
        }
        switch phase {
        case .connecting(let attempt), .open(let attempt), .connected(let attempt):
            // Whatever waits on the connection fails now, not when the socket is done closing.
            return close(attempt) + [.failPending]
        case .waiting:
            phase = .offline
            return [.endSleep]
        case .closing, .offline, .stopped, .gaveUp:
            return []
        }
    }

    /// The client stops for good.
    mutating func stop() -> [Action] {
        defer { phase = .stopped }
        switch phase {
        case .connecting(let attempt), .open(let attempt), .connected(let attempt), .closing(let attempt, _):
            return [.close(attempt: attempt), .failPending]
        case .waiting:
            return [.endSleep]
        case .offline, .stopped, .gaveUp:
            return []
        }
    }

    /// Closes the socket of `attempt`; its `closed` event decides what comes next.
    private mutating func close(_ attempt: Int) -> [Action] {
        phase = .closing(attempt: attempt, welcomed: phase == .connected(attempt: attempt))
        return [.close(attempt: attempt)]
    }

    private mutating func connect() -> Action {
        lastAttempt += 1
        phase = .connecting(attempt: lastAttempt)
        socketOpened = false
        return .connect(attempt: lastAttempt)
    }
}
