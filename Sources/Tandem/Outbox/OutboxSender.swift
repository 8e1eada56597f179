import TandemCore

/// What became of a write its caller waits for.
enum WriteOutcome: Sendable {
    case acknowledged(WriteAcknowledgement)
    case rejected(TandemError)
    /// Not confirmed yet (offline or a transient failure): kept in the outbox and retried.
    case queued
    /// Not accepted: the local store could not record it, so nothing was queued.
    case notStored(any Error)
}

/// The outbox sender's rules as a pure state machine: which queued writes go out together, how
/// many requests are in flight, what each answer decides, when to try again, and who waits for
/// which write. It does no I/O and reads no clock: events carry the outbox as it stands and the
/// time (the engine clock's elapsed time), and the engine's shell runs the actions.
///
/// - A window is up to ``Limits/requestsInFlight`` requests from the front of the outbox, sent in
///   one step, in order. A batch is a request of its own, atomic. Other queued writes go up to
///   ``Limits/writesPerRequest`` to a request that is not atomic: the server decides each write on
///   its own, so a refused one takes no other with it.
/// - Each answer decides its writes: acknowledged (`unknown` ones included: the shell reads the
///   document again), or rejected for good. A failure that may pass decides nothing: the writes
///   stay queued, every waiter hears `queued`, and the sender sleeps out the retry policy's delay,
///   or sends again at once when the server became reachable while the window was in flight.
/// - Anything that wakes the sender (a write, a read, the server reachable) sends at once, even
///   during a backoff; a wake during a send only marks a reconnection. After a failure the sender
///   probes with the first write alone, until one is answered.
/// - When the remote reports its connection down, a failed window waits for it to come back
///   instead of backing off, and a backoff under way ends: the remote's reconnection is the only
///   retry loop, and `resumed` sends at once. A write or a read still sends (it wakes the remote's
///   connection); its failure then waits too.
/// - While the remote is signed out (``isHeld``) nothing is sent, not even on a wake: the server
///   would record the writes as refused. Signing in again sends at once.
struct OutboxSender<Waiter> {
    struct Limits: Sendable, Equatable {
        /// The most writes in one request; the server takes at most 500.
        var writesPerRequest = 500
        /// The most requests sent without waiting for their answers.
        var requestsInFlight = 4
        /// About the most bytes of writes in one request (see `Mutation.estimatedWireBytes`): a
        /// request is one message, and a server refuses a message over its limit (10 MiB by
        /// default). A write larger than this goes in a request of its own; an atomic batch goes
        /// whole whatever its size.
        var bytesPerRequest = 4 << 20
    }

    /// Writes sent together: a batch (atomic), or independent writes decided one by one.
    struct Request: Equatable {
        var entries: [PendingWrite]
        var isAtomic: Bool

        var writeRequest: WriteRequest { WriteRequest(entries.map(\.mutation), isAtomic: isAtomic) }
    }

    enum Phase: Equatable {
        case idle
        /// A window is in flight.
        case sending
        /// Waiting out a backoff until this deadline (elapsed time on the engine's clock).
        case waiting(until: Duration)
    }

    enum Action: Equatable {
        /// Send these requests now, in order, in one step; mark their writes as sent.
        case send([Request])
        /// Call ``retryDue(outbox:now:)`` at this deadline.
        case sleep(until: Duration)
        /// Nothing to do.
        case none
    }

    /// What an answer decided about one write.
    enum Decision: Equatable {
        /// Applied (or answered `unknown`: decided long ago, its document must be read again).
        case acknowledged(WriteAcknowledgement)
        case rejected(TandemError)

        static func == (lhs: Decision, rhs: Decision) -> Bool {
            switch (lhs, rhs) {
            case (.acknowledged(let a), .acknowledged(let b)): return a == b
            case (.rejected(let a), .rejected(let b)): return a.code == b.code && a.message == b.message
            default: return false
            }
        }
    }

    /// What the answers to a window decided, for the shell to apply before ``proceed(outbox:now:random:)``.
    struct Settlement {
        var decisions: [(entry: PendingWrite, decision: Decision)] = []
        /// Waiters to resume, with their outcome.
        var resumed: [(Waiter, WriteOutcome)] = []
        /// The first failure that may pass, if any: the window's undecided writes stay queued.
        var failure: (any Error)?
    }

    var limits: Limits
    let policy: RetryPolicy
    private(set) var phase = Phase.idle
    /// Failures in a row, since the last answer that decided anything.
    private(set) var failures = 0
    private var inFlight: [Request] = []
    /// The server became reachable again while a window was in flight: if it fails, send again at once.
    private var reconnected = false
    private var lastFailed = false
    /// The wait the last failure asked for (a rate limit's `retryAfter`): the backoff is no shorter.
    private var lastRetryAfter: Duration?
    /// Whether the remote said its connection is down (and has not said it is back).
    private(set) var isOffline = false
    /// Whether the remote is signed out: nothing goes until it is signed in again.
    var isHeld = false
    private var waiters: [MutationID: [Waiter]] = [:]

    init(limits: Limits = Limits(), policy: RetryPolicy) {
        self.limits = limits
        self.policy = policy
    }

    // MARK: Waiters

    /// `waiter` hears what becomes of the write `id` (of a batch: its first write).
    mutating func wait(for id: MutationID, _ waiter: Waiter) {
        waiters[id, default: []].append(waiter)
    }

    /// Whether a write queued now would only hear that it stays queued: signed out, or with the
    /// connection down and the last attempt failed for it, no answer comes before the user or the
    /// connection does. Its caller is told so once the write is durable, without waiting for the
    /// next attempt to fail. While a connection is being made (down, and nothing failed on it yet)
    /// a write still waits for it.
    var answersQueuedAtOnce: Bool { isHeld || restsUntilResumed }

    /// Whether the sender rests until the connection is back: it is down and an attempt already
    /// failed on it, so another could only fail too. A wake then sends nothing; the shell asks the
    /// remote to try its connection now (``ReachabilityReporting/wakeConnection()``), and its
    /// `resumed` event sends.
    var restsUntilResumed: Bool { isOffline && lastFailed }

    /// Takes back the latest waiter for `id` (its write could not be stored).
    mutating func stopWaiting(for id: MutationID) -> Waiter? {
        guard var list = waiters[id], !list.isEmpty else { return nil }
        let waiter = list.removeLast()
        waiters[id] = list.isEmpty ? nil : list
        return waiter
    }

    var waiterCount: Int { waiters.values.reduce(0) { $0 + $1.count } }

    /// Signed out: whoever waits for a write is let go (it stays queued, and goes once signed in).
    mutating func releaseWaitersIfHeld() -> [Waiter] {
        guard isHeld, !waiters.isEmpty else { return [] }
        defer { waiters.removeAll() }
        return waiters.values.flatMap { $0 }
    }

    /// The engine left this sender's space: whoever waits for a write is let go (it stays queued
    /// in its space, sent once that space's user is signed in again).
    mutating func releaseAllWaiters() -> [Waiter] {
        defer { waiters.removeAll() }
        return waiters.values.flatMap { $0 }
    }

    // MARK: Events

    /// A write was queued, a read was made, or (`reconnected`) the server is reachable again.
    mutating func wake(outbox: Outbox, reconnected: Bool = false) -> Action {
        if isHeld, phase != .sending {
            phase = .idle
            return .none
        }
        if phase == .sending {
            if reconnected { self.reconnected = true }
            return .none
        }
        if restsUntilResumed {
            // Nothing will answer until the connection is back: `resumed` sends.
            phase = .idle
            return .none
        }
        return sendWindow(outbox)
    }

    /// The remote's connection went. Returns whether a backoff under way ends (its sleep is cancelled):
    /// the sender rests until the connection is back, or something wakes it.
    mutating func disconnected() -> Bool {
        isOffline = true
        guard case .waiting = phase else { return false }
        phase = .idle
        return true
    }

    /// The remote's connection is back: send at once.
    mutating func resumed(outbox: Outbox) -> Action {
        isOffline = false
        return wake(outbox: outbox, reconnected: true)
    }

    /// The backoff's deadline came (a stale deadline, or none, does nothing).
    mutating func retryDue(outbox: Outbox, now: Duration) -> Action {
        guard case .waiting(let deadline) = phase, now >= deadline else { return .none }
        if isHeld {
            phase = .idle
            return .none
        }
        return sendWindow(outbox)
    }

    /// The window's answers, one per request in order: its acknowledgements, or why it failed.
    /// Returns what they decide; the shell applies it to the view, then calls ``proceed(outbox:now:random:)``.
    mutating func answered(_ answers: [Result<[WriteAcknowledgement], any Error>]) -> Settlement {
        precondition(phase == .sending && answers.count == inFlight.count, "answers for a window that is not in flight")
        var settlement = Settlement()
        for (request, answer) in zip(inFlight, answers) {
            switch answer {
            case .success(let acknowledgements):
                let byID = Dictionary(acknowledgements.compactMap { ack in ack.id.map { ($0, ack) } }) { _, last in last }
                for entry in request.entries {
                    // A write the answer does not list: decided, but the server did not say how.
                    let acknowledgement = byID[entry.id]
                        ?? WriteAcknowledgement(id: entry.id, status: .unknown, version: acknowledgements.map(\.version).max() ?? .zero)
                    if acknowledgement.status == .refused {
                        let error = acknowledgement.error ?? TandemError(.unknown, "The server refused the write without saying why.")
                        settlement.decisions.append((entry, .rejected(error)))
                    } else {
                        settlement.decisions.append((entry, .acknowledged(acknowledgement)))
                    }
                }
            case .failure(let error) where TandemError.isPermanent(error):
                let refusal = (error as? TandemError) ?? TandemError(.unknown, "\(error)")
                for entry in request.entries { settlement.decisions.append((entry, .rejected(refusal))) }
            case .failure(let error):
                settlement.failure = settlement.failure ?? error
            }
        }
        for (entry, decision) in settlement.decisions {
            for waiter in waiters.removeValue(forKey: entry.id) ?? [] {
                switch decision {
                case .acknowledged(let acknowledgement): settlement.resumed.append((waiter, .acknowledged(acknowledgement)))
                case .rejected(let error): settlement.resumed.append((waiter, .rejected(error)))
                }
            }
        }
        if !settlement.decisions.isEmpty { failures = 0 }
        lastFailed = settlement.failure != nil
        lastRetryAfter = (settlement.failure as? TandemError)?.retryAfter
        if lastFailed {
            failures += 1
            // The writes stay queued: whoever waits is told so and goes on.
            for (_, list) in waiters { settlement.resumed += list.map { ($0, .queued) } }
            waiters.removeAll()
        }
        inFlight = []
        return settlement
    }

    /// After the shell applied a settlement: the next window, a backoff, or rest. `random` (0..<1)
    /// places the retry policy's jitter.
    mutating func proceed(outbox: Outbox, now: Duration, random: Double) -> Action {
        precondition(phase == .sending && inFlight.isEmpty, "proceed without a settled window")
        defer { reconnected = false }
        if isHeld {
            // Signed out: the writes wait for the sign-in, which sends.
            phase = .idle
            return .none
        }
        if lastFailed && !reconnected {
            if isOffline {
                // Nothing will answer until the connection is back: `resumed` sends.
                phase = .idle
                return .none
            }
            guard var delay = policy.delay(afterFailures: failures, random: random) else {
                // The policy gives up: the writes wait for the next wake.
                phase = .idle
                return .none
            }
            if let wait = lastRetryAfter { delay = max(delay, wait) }
            phase = .waiting(until: now + delay)
            return .sleep(until: now + delay)
        }
        phase = .idle
        return sendWindow(outbox)
    }

    /// Takes the front of the outbox as the next window, if there is one. After a failure, only
    /// its first write (or batch) goes, alone: a probe. The writes behind it stay unsent, so a
    /// write queued while offline may still merge with them; a probe answered brings back full windows.
    private mutating func sendWindow(_ outbox: Outbox) -> Action {
        let window = Self.window(of: outbox, limits: failures > 0 ? Limits(writesPerRequest: 1, requestsInFlight: 1) : limits)
        guard !window.isEmpty else {
            phase = .idle
            return .none
        }
        phase = .sending
        inFlight = window
        return .send(window)
    }

    /// Up to ``Limits/requestsInFlight`` requests from the front of the outbox, each of at most
    /// ``Limits/writesPerRequest`` writes and about ``Limits/bytesPerRequest`` bytes, each write
    /// counted as sent once more.
    static func window(of outbox: Outbox, limits: Limits) -> [Request] {
        var requests: [Request] = []
        let entries = outbox.entries
        var index = entries.startIndex
        while requests.count < max(1, limits.requestsInFlight), index < entries.endIndex {
            var run: [PendingWrite]
            if entries[index].batch != nil {
                let batch = outbox.request(startingAt: index)
                run = Array(batch)
                index = batch.endIndex
            } else {
                run = []
                var bytes = 0
                while index < entries.endIndex, run.count < max(1, limits.writesPerRequest), entries[index].batch == nil {
                    let size = entries[index].mutation.estimatedWireBytes
                    if !run.isEmpty && bytes + size > limits.bytesPerRequest { break }
                    bytes += size
                    run.append(entries[index])
                    index += 1
                }
            }
            for position in run.indices { run[position].attempts += 1 }
            requests.append(Request(entries: run, isAtomic: run.count == 1 || run[0].batch != nil))
        }
        return requests
    }
}

/// A window's answers cross from the task that sent it to the engine's executor and back.
extension OutboxSender.Settlement: Sendable where Waiter: Sendable {}
extension OutboxSender.Action: Sendable {}
extension OutboxSender.Decision: Sendable {}
