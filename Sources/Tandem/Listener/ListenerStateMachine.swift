import TandemCore

/// An engine's listener as a pure state machine: when to attach a stream and from which version,
/// when a failure waits out a backoff and when something wakes it, and when whoever awaits the
/// start may go on. Events in, actions out; it does no I/O and reads no clock: times are durations
/// elapsed on the engine's clock, passed in by the shell that runs its actions.
///
/// Each stream it attaches is an *attempt* with its own number. Events name their attempt, so an
/// event of a stream that was replaced or stopped (a late batch, a failure on cancellation) changes
/// nothing.
///
/// ```
///  stopped ──start──▶ attaching ──first batch──▶ live
///     ▲                 │  ▲                      │
///     └──stop── (any)   │  └─retry due / wake─┐   │
///                       └──failure──▶ down(until) ◀┘ failure
///                                       │
///                                       └──policy gives up──▶ gaveUp
/// ```
///
/// When the remote reports its connection (``ConnectionEvent``), a disconnection takes a running
/// listener to `offline` whatever its phase, and so does a failure while the connection is down:
/// no stream, no backoff, no failure counted. It waits there for `resumed`, which attaches at
/// once, resuming. The remote's reconnection is then the only retry loop; the backoff is for
/// failures while connected (a listen the server refused). A start or a wake still attaches
/// from `offline`: its listen wakes the remote's connection, or fails at once and waits again.
struct ListenerStateMachine: Sendable {
    enum Phase: Equatable, Sendable {
        /// No listener: never started, or stopped.
        case stopped
        /// A stream is attached and its first batch has not come yet.
        case attaching(attempt: Int)
        /// A stream is attached and has delivered.
        case live(attempt: Int)
        /// The last stream failed; the next attaches at `until` (elapsed time) unless woken first.
        case down(until: Duration)
        /// The retry policy gave up; only a new start attaches again.
        case gaveUp
        /// The remote's connection is down: attaches when it is back.
        case offline
    }

    enum Action: Equatable, Sendable {
        /// Attach a stream as `attempt`, resuming after `resumeFrom` (nil: from a snapshot).
        case attach(attempt: Int, resumeFrom: Version?)
        /// Cancel the stream of `attempt`.
        case detach(attempt: Int)
        /// Sleep until `until` (elapsed time), then send ``ListenerStateMachine/retryDue(now:)``.
        case sleep(until: Duration)
        /// Cancel the backoff sleep: the listener was woken or stopped before it ended.
        case cancelSleep
        /// The listener delivered its first batch: it is up, so queued writes may go.
        case up
        /// Whoever awaits the start goes on: the first batch came, or a failure did.
        case settleStarts
        /// The retry policy gave up after `failures` failures in a row.
        case gaveUp(failures: Int)
    }

    let policy: RetryPolicy
    private(set) var phase: Phase = .stopped
    /// Failures in a row since the listener last delivered.
    private(set) var failures = 0
    /// The version the next attach resumes after: the last batch applied, while it belongs to the
    /// query listened to.
    private(set) var resumeVersion: Version?
    private(set) var lastAttempt = 0
    /// Whether the remote's connection is up, as its last event said (up until one says otherwise).
    private(set) var isConnected = true

    init(policy: RetryPolicy, resumeVersion: Version? = nil) {
        self.policy = policy
        self.resumeVersion = resumeVersion
    }

    /// The attempt whose stream is attached now, if any.
    var attached: Int? {
        switch phase {
        case .attaching(let attempt), .live(let attempt): attempt
        case .stopped, .down, .gaveUp, .offline: nil
        }
    }

    /// Whether a listener runs: attached, waiting out a backoff, or waiting for the connection.
    var isRunning: Bool {
        switch phase {
        case .attaching, .live, .down, .offline: true
        case .stopped, .gaveUp: false
        }
    }

    /// Whether the listener runs and is not waiting out a backoff.
    var isUp: Bool { attached != nil }

    /// Whether `attempt` is the stream attached now: its batches may be applied.
    func isCurrent(_ attempt: Int) -> Bool { attached == attempt }

    // MARK: Events

    /// The app starts listening to what the listener already follows. A stopped listener (or one
    /// the policy gave up on) attaches; one waiting out a backoff attaches at once, counting its
    /// failures anew; one attached goes on, and a start awaits its first batch if it has none yet.
    mutating func start() -> [Action] {
        switch phase {
        case .stopped, .gaveUp, .offline:
            failures = 0
            return [attach()]
        case .down:
            failures = 0
            return [.cancelSleep, attach()]
        case .attaching:
            return []
        case .live:
            return [.settleStarts]
        }
    }

    /// The app listens to something else (another query or document): the stream is replaced by
    /// one that starts from a snapshot, since a resume version belongs to what reached it.
    mutating func restart() -> [Action] {
        resumeVersion = nil
        failures = 0
        var actions: [Action] = []
        switch phase {
        case .attaching(let attempt), .live(let attempt): actions.append(.detach(attempt: attempt))
        case .down: actions.append(.cancelSleep)
        case .stopped, .gaveUp, .offline: break
        }
        actions.append(attach())
        return actions
    }

    /// A listener batch reached the view at `version`: the next attach resumes after it. Called
    /// in the same locked step as the view's change, so the two never disagree.
    mutating func applied(version: Version?) {
        resumeVersion = version
    }

    /// A batch of `attempt` was applied. The first makes the listener live.
    mutating func delivered(attempt: Int) -> [Action] {
        guard case .attaching(attempt) = phase else { return [] }
        phase = .live(attempt: attempt)
        failures = 0
        return [.up, .settleStarts]
    }

    /// The stream of `attempt` failed or ended. A listener that had delivered starts counting
    /// failures anew. `now` is the elapsed time; `random` (0..<1) places the policy's jitter.
    mutating func failed(attempt: Int, now: Duration, random: Double) -> [Action] {
        guard case let attachedAttempt? = attached, attachedAttempt == attempt else { return [] }
        if case .live = phase { failures = 0 }
        // The connection went (its event may come after the stream's failure): wait for it.
        guard isConnected else { return goOffline() }
        failures += 1
        guard let delay = policy.delay(afterFailures: failures, random: random) else {
            phase = .gaveUp
            return [.settleStarts, .gaveUp(failures: failures)]
        }
        phase = .down(until: now + delay)
        return [.settleStarts, .sleep(until: now + delay)]
    }

    /// The backoff's sleep ended at `now`: attach again, resuming.
    mutating func retryDue(now: Duration) -> [Action] {
        guard case .down(let until) = phase, now >= until else { return [] }
        return [attach()]
    }

    /// A read, a write or a reconnection: a listener waiting out a backoff attaches at once.
    mutating func wake() -> [Action] {
        switch phase {
        case .down: return [.cancelSleep, attach()]
        case .offline: return [attach()]
        case .stopped, .attaching, .live, .gaveUp: return []
        }
    }

    /// The app stops listening. The resume version stays, for a start of the same thing later.
    mutating func stop() -> [Action] {
        defer { phase = .stopped }
        switch phase {
        case .attaching(let attempt): return [.detach(attempt: attempt), .settleStarts]
        case .live(let attempt): return [.detach(attempt: attempt)]
        case .down: return [.cancelSleep]
        case .stopped, .gaveUp, .offline: return []
        }
    }

    /// The remote's connection went. A running listener drops its stream or its backoff and
    /// waits for the connection; whoever awaits a start goes on (the cache is shown).
    mutating func disconnected() -> [Action] {
        isConnected = false
        switch phase {
        case .attaching(let attempt), .live(let attempt): return [.detach(attempt: attempt)] + goOffline()
        case .down: return [.cancelSleep] + goOffline()
        case .stopped, .gaveUp, .offline: return []
        }
    }

    /// The remote's connection is back: a listener waiting for it, or waiting out a backoff,
    /// attaches at once, resuming.
    mutating func resumed() -> [Action] {
        isConnected = true
        switch phase {
        case .offline:
            failures = 0
            return [attach()]
        case .down:
            return [.cancelSleep, attach()]
        case .stopped, .attaching, .live, .gaveUp:
            return []
        }
    }

    private mutating func goOffline() -> [Action] {
        phase = .offline
        return [.settleStarts]
    }

    /// The engine switched to another user's space, which resumes from its own version: a running
    /// listener's stream is replaced by one from there (a new attempt, so the old stream's batches
    /// are dropped); one waiting for the connection, or stopped, keeps the version for its next
    /// attach.
    mutating func switchedSpace(resumeVersion: Version?) -> [Action] {
        self.resumeVersion = resumeVersion
        failures = 0
        switch phase {
        case .attaching(let attempt), .live(let attempt): return [.detach(attempt: attempt), attach()]
        case .down: return [.cancelSleep, attach()]
        case .offline, .stopped, .gaveUp: return []
        }
    }

    /// The cache was dropped: the next attach starts from a snapshot.
    mutating func forgetResumeVersion() {
        resumeVersion = nil
    }

    private mutating func attach() -> Action {
        lastAttempt += 1
        phase = .attaching(attempt: lastAttempt)
        return .attach(attempt: lastAttempt, resumeFrom: resumeVersion)
    }
}
