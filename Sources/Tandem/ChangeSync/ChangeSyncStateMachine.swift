import TandemCore

/// A point in a zone's change feed: everything up to this version was fetched. Opaque to the app,
/// which stores it with the data it fetched and hands it back to ``ChangeSyncEngine/fetchChanges(token:)``.
public struct ChangeToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The version of the zone's change feed: every change up to it was fetched.
    public let version: Version

    /// A token at `version` of the change feed.
    public init(_ version: Version) { self.version = version }

    public var description: String { "token@\(version.rawValue)" }
}

/// The change-sync engine's decisions as a pure state machine: which operation runs next, when,
/// how a failure is retried, split or halts, and how a fetch follows the feed. Events in, actions
/// out; it does no I/O and reads no clock: each event carries the time elapsed on the engine's
/// clock.
///
/// Operations run one at a time, from four queues in priority order: create the zone, subscribe
/// to it (a live listener), send pending changes, fetch changes since a token. Nothing runs until
/// the engine is started and someone is signed in; sends and fetches wait until the zone exists and
/// the subscription is up. Within a queue, first in, first out.
///
/// Sends may be pipelined: up to ``Limits/maxSendsInFlight`` batches are out at once, taken from
/// the front of the queue in order (so their mutations' sequences increase in the order they are
/// sent, as the server requires), and never two changes of one record at once. When one fails, or
/// the engine stops, every batch out goes back to the front, in the order they went (the server
/// holds back a writer's later writes after a refused one, so they are sent again behind it).
///
/// ```
///  stopped ──start (signed in)──▶ running ──non-retryable error, or maxRetries──▶ halted
///     ▲                              │                                              │
///     └────────────stop──────────────┘◀───────────────────start─────────────────────┘
/// ```
///
/// While the client's connection is down (``Event/connection(up:now:)``) a running engine starts
/// nothing and counts no transient failure: being offline for long never halts it. Its work runs
/// as soon as the connection is back.
struct ChangeSyncStateMachine: Sendable {
    /// The limits the machine runs under.
    struct Limits: Sendable, Hashable {
        /// Retries of one operation in a row before the engine halts.
        var maxRetries = 5
        /// Records in one send.
        var maxRecordsPerBatch = 400
        /// Bytes of records in one send (a single larger record goes alone).
        var maxBytesPerBatch = 2 << 20
        /// The first wait after a failure without a `retryAfter`; each next one doubles.
        var backoffBase: Duration = .seconds(1)
        /// The longest wait after a failure, and the widest spacing of operations.
        var maxDelay: Duration = .seconds(64)
        /// The spacing a rate limit starts the throttle at (it doubles with each one after).
        var throttleStep: Duration = .seconds(1)
        /// Send batches out at once, waiting for their answers.
        var maxSendsInFlight = 1
    }

    /// The queues, in the order they run.
    enum Queue: String, Sendable, Hashable, CaseIterable, Codable {
        case createZone, subscribe, send, fetch
    }

    /// One pending change of a record: saved (its current fields) or deleted, and its size.
    /// Once sent it is never replaced: it goes again as it went, with the same mutation id, until
    /// the server answers it (a newer change of the record waits behind it).
    struct PendingChange: Sendable, Hashable, Codable {
        var recordID: String
        var isDeletion: Bool
        var bytes: Int
        var isSent = false
        /// Its row in the engine's stored queue.
        var rowID: Int64 = 0

        init(recordID: String, isDeletion: Bool, bytes: Int, isSent: Bool = false, rowID: Int64 = 0) {
            self.recordID = recordID
            self.isDeletion = isDeletion
            self.bytes = bytes
            self.isSent = isSent
            self.rowID = rowID
        }
    }

    /// An operation for the shell to run.
    enum Operation: Sendable, Hashable {
        case createZone
        case subscribe
        /// Sends `changes` as the batch `batch` (its id, carried by every result of it).
        case send(batch: Int, changes: [PendingChange])
        /// Fetches the changes after `token` (nil: from the beginning).
        case fetch(token: ChangeToken?)

        var queue: Queue {
            switch self {
            case .createZone: .createZone
            case .subscribe: .subscribe
            case .send: .send
            case .fetch: .fetch
            }
        }
    }

    /// How an operation failed, as the shell classified the server's answer.
    enum Failure: Sendable, Hashable {
        /// Worth retrying (the connection went, the server was busy); after `retryAfter` when the
        /// server said.
        case transient(TandemError, retryAfter: Duration?)
        /// Refused for the rate of requests: retried after `retryAfter` (or a backoff), and the
        /// throttle widens.
        case rateLimited(TandemError, retryAfter: Duration?)
        /// The batch is too large for one request: halved and sent again.
        case tooLarge(TandemError)
        /// The token is older than the server keeps: the fetch starts over from the beginning, at
        /// once. Refused again before that fetch reaches the feed's end (or refused from the
        /// beginning itself), it starts over after a backoff, counted as a retry.
        case tokenExpired
        /// The zone is gone (or was never made): made again, then subscribed again.
        case zoneMissing
        /// Nothing retrying would change: the engine halts.
        case fatal(TandemError)
    }

    /// What the shell is told to do.
    enum Action: Sendable, Hashable {
        /// Run `operation` as `attempt`, then send ``Event/succeeded(_:attempt:now:)`` or
        /// ``Event/failed(_:attempt:now:)`` with that attempt (an answer for another attempt, which a
        /// stop or an account change left behind, changes nothing).
        case run(Operation, attempt: Int)
        /// Send ``Event/tick(now:)`` at `at` (elapsed time): an operation may run then.
        case wake(at: Duration)
        /// The token was reset (it expired): the app drops the one it stored.
        case tokenReset
        /// The engine halted with `error`; only a start resumes it.
        case halted(TandemError)
        /// The pending changes of a send the server answered for each record: they leave the
        /// queue (results, conflicts and per-record failures are the shell's to tell).
        case settled(batch: Int)
        /// The pending queue or the engine's state changed: the shell stores it.
        case persist
    }

    /// What happened.
    enum Event: Sendable, Hashable {
        case start(now: Duration)
        case stop
        /// Who is signed in (nil: nobody). Another user is another account: the shell gives that
        /// account's pending changes and token.
        case account(String?, pending: [PendingChange], token: ChangeToken?, zoneReady: Bool, now: Duration)
        /// The app queued changes (saved and deleted records).
        case enqueue([PendingChange], now: Duration)
        /// The app (or a push) asks for the changes after `token`.
        case fetch(ChangeToken?, now: Duration)
        /// The subscription saw a change: fetch after the latest token.
        case pushed(now: Duration)
        /// The subscription ended (the connection went): subscribed again before any send or fetch.
        case unsubscribed(now: Duration)
        case succeeded(Outcome, attempt: Int, now: Duration)
        case failed(Failure, attempt: Int, now: Duration)
        /// Conflicting records were resolved: the chosen ones are sent next, before anything else.
        case resolved([PendingChange], now: Duration)
        /// A conflict was left unresolved: the engine halts.
        case unresolved(TandemError)
        /// The client's connection went (`up` false) or came back. While it is down nothing
        /// starts, and a transient failure waits for it instead of counting toward a halt; once
        /// it is back, the work waiting runs at once.
        case connection(up: Bool, now: Duration)
        case tick(now: Duration)
    }

    /// How an operation succeeded.
    enum Outcome: Sendable, Hashable {
        case zoneCreated
        case subscribed
        /// The server answered the batch for each of its records.
        case sent(batch: Int)
        /// A page of the feed came, up to `token`; `hasMore` when the feed goes on after it.
        case fetched(token: ChangeToken, hasMore: Bool)
    }

    let limits: Limits
    private(set) var isRunning = false
    private(set) var haltError: TandemError?
    private(set) var account: String?
    private(set) var zoneReady = false
    private(set) var subscribed = false
    /// Whether the client's connection is up, as last told (up until told otherwise).
    private(set) var isConnected = true
    /// Changes waiting to be sent, in order: a record's change not yet sent once, after its
    /// change sent and not yet answered, if any.
    private(set) var pending: [PendingChange] = [] {
        didSet { if pending.isEmpty { unsent = [] } }
    }
    /// The records with a change in `pending` not yet sent: a change of one of them replaces it.
    private var unsent: Set<String> = []
    /// Tokens to fetch after, in order; each once.
    private(set) var fetches: [ChangeToken?] = []
    /// The latest token: where a push's fetch starts.
    private(set) var token: ChangeToken?
    /// A push came while a fetch ran: that fetch may have read its page before the change, so
    /// another follows it.
    private var pushedDuringFetch = false
    /// The feed is being fetched again from the beginning because a token expired, and has not
    /// reached its end yet: another expiry meanwhile backs off before starting over again.
    private(set) var restarting = false
    /// One operation out, and the attempt it is (each run is a new one).
    struct Running: Sendable, Hashable {
        var operation: Operation
        var attempt: Int
    }

    /// The operations running now, in the order they started: one, or several sends.
    private(set) var running: [Running] = []
    /// The operation that started first of those running now.
    var current: Operation? { running.first?.operation }
    /// The last attempt given.
    private(set) var attempt = 0
    /// Failures of the current queue's front operation in a row.
    private(set) var retryCount = 0
    /// The spacing between two operations: widened by rate limits, narrowed by successes.
    private(set) var throttle: Duration = .zero
    /// The most records the next send takes: halved by a "too large" answer, back to the limit
    /// once the queue is empty.
    private(set) var batchLimit: Int
    /// No operation starts before this (a backoff, or the throttle after the last one).
    private(set) var notBefore: Duration = .zero
    private var nextBatch = 0
    /// A wake asked for and not yet come: asked again only for an earlier time.
    private var wakeAt: Duration?

    init(limits: Limits = Limits()) {
        self.limits = limits
        batchLimit = limits.maxRecordsPerBatch
    }

    var isHalted: Bool { haltError != nil }

    /// Operations waiting or running, counted while stopped too: pending changes count one each.
    var pendingCount: Int {
        var count = pending.count + fetches.count
        for run in running {
            switch run.operation {
            case .send(_, let changes): count += changes.count
            case .fetch: count += 1
            case .createZone, .subscribe: break
            }
        }
        return count
    }

    /// The queue of the operation running now.
    var currentQueue: Queue? { current?.queue }

    mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .start(let now):
            isRunning = true
            haltError = nil
            retryCount = 0
            notBefore = min(notBefore, now)
            return next(now: now)
        case .stop:
            isRunning = false
            wakeAt = nil
            requeueRunning()
            return []
        case .account(let uid, let pending, let token, let zoneReady, let now):
            guard uid != account else { return next(now: now) }
            account = uid
            // Another account: its own queue, token and zone; what ran for the last one is dropped
            // (its changes are still in the last account's stored queue).
            running = []
            self.pending = pending
            unsent = Set(pending.lazy.filter { !$0.isSent }.map(\.recordID))
            self.token = token
            self.zoneReady = zoneReady
            fetches = []
            pushedDuringFetch = false
            restarting = false
            subscribed = false
            retryCount = 0
            batchLimit = limits.maxRecordsPerBatch
            wakeAt = nil
            return next(now: now)
        case .enqueue(let changes, let now):
            for change in changes { add(change) }
            return [.persist] + next(now: now)
        case .fetch(let token, let now):
            queueFetch(token)
            return next(now: now)
        case .pushed(let now):
            guard subscribed else { return [] }
            if running.contains(where: { $0.operation.queue == .fetch }) {
                pushedDuringFetch = true
                return []
            }
            queueFetch(token)
            return next(now: now)
        case .unsubscribed(let now):
            subscribed = false
            return next(now: now)
        case .succeeded(let outcome, let attempt, let now):
            guard let index = running.firstIndex(where: { $0.attempt == attempt }) else { return next(now: now) }
            return succeeded(outcome, at: index, now: now)
        case .failed(let failure, let attempt, let now):
            guard let index = running.firstIndex(where: { $0.attempt == attempt }) else { return next(now: now) }
            return failed(failure, at: index, now: now)
        case .resolved(let changes, let now):
            // Sent next, before anything else queued (behind changes already sent once, which go
            // again first: their sequences are older); a record the app changed again meanwhile
            // keeps its newer change (which meets the conflict again, and is resolved again).
            let resolved = changes.filter { !unsent.contains($0.recordID) }
            pending.insert(contentsOf: resolved, at: pending.firstIndex { !$0.isSent } ?? pending.endIndex)
            unsent.formUnion(resolved.lazy.filter { !$0.isSent }.map(\.recordID))
            return [.persist] + next(now: now)
        case .unresolved(let error):
            return halt(error)
        case .connection(let up, let now):
            guard up != isConnected else { return next(now: now) }
            isConnected = up
            guard up else {
                wakeAt = nil
                return []
            }
            // Failures while the connection was down were the network's, not the server's.
            retryCount = 0
            notBefore = min(notBefore, now)
            return next(now: now)
        case .tick(let now):
            if let wakeAt, wakeAt <= now { self.wakeAt = nil }
            return next(now: now)
        }
    }

    // MARK: Queues

    /// A change of a record already waiting, and not yet sent, replaces it there; otherwise it
    /// joins the end. A record in the batch being sent (or sent before and not yet answered) waits
    /// for it, so it is sent again after.
    private mutating func add(_ change: PendingChange) {
        if unsent.contains(change.recordID), let index = pending.firstIndex(where: { $0.recordID == change.recordID && !$0.isSent }) {
            pending[index] = change
        } else {
            pending.append(change)
            unsent.insert(change.recordID)
        }
    }

    /// A fetch after a token already queued (or running) is not queued twice.
    private mutating func queueFetch(_ token: ChangeToken?) {
        if fetches.contains(token) { return }
        if running.contains(where: { $0.operation == .fetch(token: token) }) { return }
        fetches.append(token)
    }

    /// The operation that runs next, if one may: the first queue in priority order with work.
    /// Beside running sends, only another send may start.
    private func runnable() -> Operation? {
        guard isRunning, !isHalted, isConnected, account != nil else { return nil }
        let sending = running.filter { $0.operation.queue == .send }
        guard sending.count == running.count, sending.count < max(1, limits.maxSendsInFlight) else { return nil }
        if !zoneReady { return running.isEmpty ? .createZone : nil }
        if !subscribed { return running.isEmpty ? .subscribe : nil }
        if !pending.isEmpty {
            let changes = batch(skipping: sending)
            return changes.isEmpty ? nil : .send(batch: nextBatch, changes: changes)
        }
        if running.isEmpty, let token = fetches.first { return .fetch(token: token) }
        return nil
    }

    /// The front of the pending changes that one send takes: at most `batchLimit` records and
    /// `maxBytesPerBatch` bytes (one record at least), up to the first change of a record a
    /// running send has out.
    private func batch(skipping sending: [Running]) -> [PendingChange] {
        var out: Set<String> = []
        for run in sending {
            if case .send(_, let changes) = run.operation { out.formUnion(changes.lazy.map(\.recordID)) }
        }
        var taken: [PendingChange] = []
        var bytes = 0
        for change in pending {
            guard taken.count < batchLimit, !out.contains(change.recordID) else { break }
            if !taken.isEmpty && bytes + change.bytes > limits.maxBytesPerBatch { break }
            taken.append(change)
            bytes += change.bytes
        }
        return taken
    }

    /// Starts what may run now: one operation, or sends up to the pipeline's depth.
    private mutating func next(now: Duration) -> [Action] {
        var actions: [Action] = []
        while let action = startNext(now: now) {
            actions.append(action)
            guard case .run(.send, _) = action else { break }
        }
        return actions
    }

    private mutating func startNext(now: Duration) -> Action? {
        guard let next = runnable() else { return nil }
        guard now >= notBefore else {
            if let wakeAt, wakeAt <= notBefore { return nil }
            wakeAt = notBefore
            return .wake(at: notBefore)
        }
        var operation = next
        switch operation {
        case .send(let batch, let changes):
            pending.removeFirst(changes.count)
            for change in changes where !change.isSent { unsent.remove(change.recordID) }
            nextBatch += 1
            // Sent from now on: never replaced, and sent again as they are.
            operation = .send(batch: batch, changes: changes.map { change in
                var change = change
                change.isSent = true
                return change
            })
        case .fetch:
            fetches.removeFirst()
        case .createZone, .subscribe:
            break
        }
        attempt += 1
        running.append(Running(operation: operation, attempt: attempt))
        return .run(operation, attempt: attempt)
    }

    /// The running operations' work goes back to the front of its queue (a stop, a retry): every
    /// send out, in the order they went (an answer to one of them changes nothing now).
    private mutating func requeueRunning() {
        defer { running = [] }
        var sent: [PendingChange] = []
        for run in running {
            switch run.operation {
            case .send(_, let changes):
                // Back in front, as they were sent; changes queued meanwhile for the same records
                // are newer, and go after them.
                sent.append(contentsOf: changes)
            case .fetch(let token):
                fetches.removeAll { $0 == token }
                fetches.insert(token, at: 0)
            case .createZone, .subscribe:
                break
            }
        }
        pending.insert(contentsOf: sent, at: 0)
    }

    // MARK: Outcomes

    private mutating func succeeded(_ outcome: Outcome, at index: Int, now: Duration) -> [Action] {
        let operation = running[index].operation
        guard operation.queue == outcome.queue else { return next(now: now) }
        if case .send(let sent, _) = operation, case .sent(let batch) = outcome, sent != batch { return next(now: now) }
        running.remove(at: index)
        retryCount = 0
        // Halved, down to none below an eighth of the backoff's base.
        throttle = throttle / 2 < limits.backoffBase / 8 ? .zero : throttle / 2
        notBefore = now + throttle
        var actions: [Action] = []
        switch outcome {
        case .zoneCreated:
            zoneReady = true
            actions.append(.persist)
        case .subscribed:
            subscribed = true
        case .sent(let batch):
            actions.append(.settled(batch: batch))
            if pending.isEmpty { batchLimit = limits.maxRecordsPerBatch }
            actions.append(.persist)
        case .fetched(let token, let hasMore):
            self.token = token
            // The feed goes on: its next page before anything else fetched.
            if hasMore {
                fetches.removeAll { $0 == token }
                fetches.insert(token, at: 0)
            } else if pushedDuringFetch {
                queueFetch(token)
            }
            if !hasMore {
                pushedDuringFetch = false
                restarting = false
            }
            actions.append(.persist)
        }
        return actions + next(now: now)
    }

    private mutating func failed(_ failure: Failure, at index: Int, now: Duration) -> [Action] {
        let operation = running[index].operation
        switch failure {
        case .transient where !isConnected:
            // The connection is down: the work waits for it, with no failure counted.
            requeueRunning()
            return []
        case .transient(let error, let retryAfter):
            return retry(error, after: retryAfter, now: now)
        case .rateLimited(let error, let retryAfter):
            throttle = min(limits.maxDelay, max(limits.throttleStep, throttle * 2))
            return retry(error, after: retryAfter, now: now)
        case .tooLarge(let error):
            guard case .send(_, let changes) = operation, changes.count > 1 else { return halt(error) }
            // Replaced by its halves: a new operation, with no failure counted.
            batchLimit = max(1, changes.count / 2)
            retryCount = 0
            requeueRunning()
            return next(now: now)
        case .tokenExpired:
            guard case .fetch(let expired) = operation else { return halt(TandemError(.internal, "A send was answered as an expired token.")) }
            // From the beginning, in place of the expired token (a fetch runs alone).
            running = []
            fetches.removeAll { $0 == nil }
            fetches.insert(nil, at: 0)
            var actions: [Action] = []
            if expired != nil || token != nil {
                token = nil
                actions = [.tokenReset, .persist]
            }
            if expired != nil && !restarting {
                // The first expiry: everything is fetched again, at once.
                restarting = true
                retryCount = 0
                return actions + next(now: now)
            }
            // Refused from the beginning, or again before the fetch from the beginning reached
            // the feed's end: starting over at once would loop as fast as the server answers.
            restarting = true
            return actions + backOff(Self.feedRefused, after: nil, now: now)
        case .zoneMissing:
            requeueRunning()
            zoneReady = false
            subscribed = false
            retryCount = 0
            return [.persist] + next(now: now)
        case .fatal(let error):
            requeueRunning()
            return halt(error)
        }
    }

    /// The error the engine halts with when the server keeps refusing its change feed as too old,
    /// from the beginning too.
    static let feedRefused = TandemError(.outOfRange, "The server kept refusing this zone's change feed as too old (out-of-range), even fetched again from the beginning; the engine retried with a backoff, then stopped. A server older than this client refuses a fetch from the beginning once it has pruned a deletion: upgrade the server, then start the engine.")

    /// The operation waits and runs again, unless it failed too often.
    private mutating func retry(_ error: TandemError, after retryAfter: Duration?, now: Duration) -> [Action] {
        requeueRunning()
        return backOff(error, after: retryAfter, now: now)
    }

    /// The work at the front of its queue waits (the server's `retryAfter`, else a backoff that
    /// doubles with each failure in a row) and runs again, unless it failed too often.
    private mutating func backOff(_ error: TandemError, after retryAfter: Duration?, now: Duration) -> [Action] {
        retryCount += 1
        guard retryCount <= limits.maxRetries else { return halt(error) }
        let backoff = min(limits.maxDelay, limits.backoffBase * (1 << min(retryCount - 1, 30)))
        let wait = max(retryAfter ?? backoff, throttle, .milliseconds(1))
        notBefore = now + wait
        return next(now: now)
    }

    private mutating func halt(_ error: TandemError) -> [Action] {
        requeueRunning()
        haltError = error
        isRunning = false
        wakeAt = nil
        return [.halted(error)]
    }
}

extension ChangeSyncStateMachine.Outcome {
    var queue: ChangeSyncStateMachine.Queue {
        switch self {
        case .zoneCreated: .createZone
        case .subscribed: .subscribe
        case .sent: .send
        case .fetched: .fetch
        }
    }
}
