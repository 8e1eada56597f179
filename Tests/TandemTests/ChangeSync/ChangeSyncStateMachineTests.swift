import Testing
@testable import Tandem
import TandemCore

/// The change-sync engine's rules, on its state machine alone: times passed in, no I/O.
@Suite("Change sync state machine")
struct ChangeSyncStateMachineTests {
    typealias Machine = ChangeSyncStateMachine
    typealias Change = Machine.PendingChange

    static func saves(_ count: Int, from first: Int = 0, bytes: Int = 100) -> [Change] {
        (first..<first + count).map { Change(recordID: "r\($0)", isDeletion: false, bytes: bytes) }
    }

    /// A machine signed in and started, zone made and subscribed, at time zero.
    static func ready(_ limits: Machine.Limits = Machine.Limits()) -> Machine {
        var machine = Machine(limits: limits)
        _ = machine.handle(.account("ada", pending: [], token: nil, zoneReady: true, now: .zero))
        let actions = machine.handle(.start(now: .zero))
        #expect(actions == [.run(.subscribe, attempt: 1)])
        _ = machine.handle(.succeeded(.subscribed, attempt: 1, now: .zero))
        return machine
    }

    /// The operation the actions run, and its attempt.
    static func run(_ actions: [Machine.Action]) -> (Machine.Operation, Int)? {
        for action in actions { if case .run(let operation, let attempt) = action { return (operation, attempt) } }
        return nil
    }

    static func sentBatch(_ actions: [Machine.Action]) -> (batch: Int, changes: [Change], attempt: Int)? {
        guard let (operation, attempt) = run(actions), case .send(let batch, let changes) = operation else { return nil }
        return (batch, changes, attempt)
    }

    @Test("nothing runs until started and signed in; then the queues run in priority order: create zone, subscribe, send, fetch")
    func priority() {
        var machine = Machine()
        #expect(machine.handle(.enqueue(Self.saves(2), now: .zero)) == [.persist])
        #expect(machine.handle(.fetch(nil, now: .zero)).isEmpty)
        #expect(machine.pendingCount == 3, "queued work counts while stopped")
        #expect(machine.handle(.start(now: .zero)).isEmpty, "nobody signed in")
        var actions = machine.handle(.account("ada", pending: Self.saves(2), token: nil, zoneReady: false, now: .zero))
        #expect(actions == [.run(.createZone, attempt: 1)])
        #expect(machine.currentQueue == .createZone)
        // Nothing else starts while one operation runs.
        #expect(machine.handle(.fetch(ChangeToken(5), now: .zero)).isEmpty)
        actions = machine.handle(.succeeded(.zoneCreated, attempt: 1, now: .zero))
        #expect(actions == [.persist, .run(.subscribe, attempt: 2)])
        actions = machine.handle(.succeeded(.subscribed, attempt: 2, now: .zero))
        #expect(Self.sentBatch(actions)?.changes.map(\.recordID) == ["r0", "r1"])
        actions = machine.handle(.succeeded(.sent(batch: 0), attempt: 3, now: .zero))
        #expect(actions == [.settled(batch: 0), .persist, .run(.fetch(token: ChangeToken(5)), attempt: 4)])
        #expect(machine.handle(.succeeded(.fetched(token: ChangeToken(9), hasMore: false), attempt: 4, now: .zero)) == [.persist])
        #expect(machine.token == ChangeToken(9) && machine.pendingCount == 0 && machine.current == nil)
    }

    @Test("signed out, nothing runs; another user is another account: its own queue and token, and the zone and subscription made again")
    func accounts() {
        var machine = Self.ready()
        _ = machine.handle(.enqueue(Self.saves(1), now: .zero))
        #expect(machine.current != nil)
        var actions = machine.handle(.account(nil, pending: [], token: nil, zoneReady: false, now: .zero))
        #expect(actions.isEmpty && machine.current == nil && machine.pendingCount == 0)
        // A late answer for the signed-out account's send changes nothing.
        #expect(machine.handle(.succeeded(.sent(batch: 0), attempt: 2, now: .zero)).isEmpty)
        actions = machine.handle(.account("bob", pending: Self.saves(3, from: 10), token: ChangeToken(4), zoneReady: false, now: .zero))
        #expect(actions == [.run(.createZone, attempt: 3)])
        #expect(machine.token == ChangeToken(4) && machine.pending.map(\.recordID) == ["r10", "r11", "r12"])
    }

    @Test("stop keeps the queue, the running operation's work included; a late answer for it changes nothing; start runs it again, as it was sent, with a newer change of a sent record after it")
    func stopKeepsTheQueue() {
        var machine = Self.ready()
        let sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(3), now: .zero)))!
        #expect(sent.changes.allSatisfy { $0.isSent })
        #expect(machine.handle(.stop).isEmpty)
        #expect(machine.pendingCount == 3 && machine.current == nil && !machine.isRunning)
        #expect(machine.handle(.succeeded(.sent(batch: sent.batch), attempt: sent.attempt, now: .zero)).isEmpty)
        #expect(machine.pendingCount == 3)
        // A newer change of r1 does not replace the one sent (it may have been applied): it goes after.
        _ = machine.handle(.enqueue([Change(recordID: "r1", isDeletion: true, bytes: 0)], now: .seconds(1)))
        let again = Self.sentBatch(machine.handle(.start(now: .seconds(1))))!
        #expect(Array(again.changes.prefix(3)) == sent.changes && again.batch != sent.batch)
        #expect(again.changes.last == Change(recordID: "r1", isDeletion: true, bytes: 0, isSent: true))
    }

    @Test("800 pending records go as 400 + 400; a record changed again while its batch is out is sent again after it")
    func batchesOf400() {
        var machine = Self.ready()
        let first = Self.sentBatch(machine.handle(.enqueue(Self.saves(800), now: .zero)))!
        #expect(first.changes.count == 400 && first.changes.first?.recordID == "r0")
        // r5 changes while the first batch is out; r600 changes in place in the queue.
        _ = machine.handle(.enqueue([Change(recordID: "r5", isDeletion: false, bytes: 7), Change(recordID: "r600", isDeletion: true, bytes: 0)], now: .zero))
        #expect(machine.pendingCount == 801)
        let second = Self.sentBatch(machine.handle(.succeeded(.sent(batch: first.batch), attempt: first.attempt, now: .zero)))!
        #expect(second.changes.count == 400 && second.changes.first?.recordID == "r400")
        #expect(second.changes.first { $0.recordID == "r600" }?.isDeletion == true)
        let third = Self.sentBatch(machine.handle(.succeeded(.sent(batch: second.batch), attempt: second.attempt, now: .zero)))!
        #expect(third.changes == [Change(recordID: "r5", isDeletion: false, bytes: 7, isSent: true)])
    }

    /// Every send the actions start, in order.
    static func sentBatches(_ actions: [Machine.Action]) -> [(batch: Int, changes: [Change], attempt: Int)] {
        actions.compactMap { action in
            guard case .run(.send(let batch, let changes), let attempt) = action else { return nil }
            return (batch, changes, attempt)
        }
    }

    /// A ready machine sending batches of two records, three out at once.
    static func pipelined() -> Machine {
        var limits = Machine.Limits()
        limits.maxRecordsPerBatch = 2
        limits.maxSendsInFlight = 3
        return ready(limits)
    }

    @Test("pipelined: up to maxSendsInFlight batches go out at once, in queue order; a record with a change out holds back the batch that would carry its next change; nothing else runs beside them")
    func pipelinedSends() {
        var machine = Self.pipelined()
        let out = Self.sentBatches(machine.handle(.enqueue(Self.saves(8), now: .zero)))
        #expect(out.map { $0.changes.map(\.recordID) } == [["r0", "r1"], ["r2", "r3"], ["r4", "r5"]])
        #expect(out.map(\.batch) == [0, 1, 2] && machine.pendingCount == 8)
        // A fetch waits for the sends; so does a change of r2 (out now) and everything behind it.
        #expect(machine.handle(.fetch(nil, now: .zero)).isEmpty)
        _ = machine.handle(.enqueue([Change(recordID: "r2", isDeletion: true, bytes: 1)], now: .zero))
        let next = Self.sentBatches(machine.handle(.succeeded(.sent(batch: 0), attempt: out[0].attempt, now: .zero)))
        #expect(next.map { $0.changes.map(\.recordID) } == [["r6", "r7"]])
        #expect(Self.sentBatches(machine.handle(.succeeded(.sent(batch: 2), attempt: out[2].attempt, now: .zero))).isEmpty,
                "the r2 deletion waits for the batch that has r2 out")
        let after = machine.handle(.succeeded(.sent(batch: 1), attempt: out[1].attempt, now: .zero))
        #expect(Self.sentBatches(after).map { $0.changes.map(\.recordID) } == [["r2"]])
        let last = Self.sentBatches(after)[0]
        _ = machine.handle(.succeeded(.sent(batch: next[0].batch), attempt: next[0].attempt, now: .zero))
        let fetch = machine.handle(.succeeded(.sent(batch: last.batch), attempt: last.attempt, now: .zero))
        #expect(Self.run(fetch)?.0 == .fetch(token: nil), "the fetch once no send is out")
    }

    @Test("pipelined: when one batch out fails, every batch out goes back to the front in the order it went (their later answers change nothing), and they go again in that order; a stop does the same")
    func pipelinedFailure() {
        var machine = Self.pipelined()
        let out = Self.sentBatches(machine.handle(.enqueue(Self.saves(7), now: .zero)))
        #expect(out.count == 3)
        // The middle one fails (the server held it back behind a refused one, say): all three go back.
        _ = machine.handle(.failed(.transient(TandemError(.aborted, "behind another"), retryAfter: nil), attempt: out[1].attempt, now: .zero))
        #expect(machine.running.isEmpty && machine.retryCount == 1)
        #expect(machine.pending.map(\.recordID) == ["r0", "r1", "r2", "r3", "r4", "r5", "r6"])
        #expect(machine.pending.prefix(6).allSatisfy(\.isSent) && !machine.pending[6].isSent)
        // A late success for one of them changes nothing.
        #expect(machine.handle(.succeeded(.sent(batch: 0), attempt: out[0].attempt, now: .zero)).isEmpty)
        // A conflict resolved meanwhile goes behind the changes sent before (their sequences are older).
        _ = machine.handle(.resolved([Change(recordID: "c1", isDeletion: false, bytes: 1)], now: .zero))
        #expect(machine.pending.map(\.recordID) == ["r0", "r1", "r2", "r3", "r4", "r5", "c1", "r6"])
        let again = Self.sentBatches(machine.handle(.tick(now: .seconds(1))))
        #expect(again.map { $0.changes.map(\.recordID) } == [["r0", "r1"], ["r2", "r3"], ["r4", "r5"]])
        #expect(again.allSatisfy { $0.changes.allSatisfy(\.isSent) })
        // A stop puts all three back, in order.
        _ = machine.handle(.stop)
        #expect(machine.pending.map(\.recordID) == ["r0", "r1", "r2", "r3", "r4", "r5", "c1", "r6"] && machine.running.isEmpty)
        // "Too large" for one halves the batches and sends them all again, in order.
        let restarted = Self.sentBatches(machine.handle(.start(now: .seconds(2))))
        #expect(restarted.count == 3)
        let halves = Self.sentBatches(machine.handle(.failed(.tooLarge(TandemError(.resourceExhausted, "too large")), attempt: restarted[2].attempt, now: .seconds(2))))
        #expect(halves.map { $0.changes.map(\.recordID) } == [["r0"], ["r1"], ["r2"]])
    }

    @Test("a batch stops at the byte limit; one record larger than it goes alone")
    func byteLimit() {
        var limits = Machine.Limits()
        limits.maxBytesPerBatch = 1_000
        var machine = Self.ready(limits)
        let changes = Self.saves(3, bytes: 400) + [Change(recordID: "big", isDeletion: false, bytes: 5_000)] + Self.saves(1, from: 9, bytes: 10)
        let first = Self.sentBatch(machine.handle(.enqueue(changes, now: .zero)))!
        #expect(first.changes.map(\.recordID) == ["r0", "r1"])
        let second = Self.sentBatch(machine.handle(.succeeded(.sent(batch: first.batch), attempt: first.attempt, now: .zero)))!
        #expect(second.changes.map(\.recordID) == ["r2"])
        let third = Self.sentBatch(machine.handle(.succeeded(.sent(batch: second.batch), attempt: second.attempt, now: .zero)))!
        #expect(third.changes.map(\.recordID) == ["big"])
        let fourth = Self.sentBatch(machine.handle(.succeeded(.sent(batch: third.batch), attempt: third.attempt, now: .zero)))!
        #expect(fourth.changes.map(\.recordID) == ["r9"])
    }

    @Test("a batch of 100 answered 'too large' goes as 50 + 50, with no failure counted; a single record too large halts")
    func tooLargeHalves() {
        var limits = Machine.Limits()
        limits.maxRecordsPerBatch = 100
        var machine = Self.ready(limits)
        let first = Self.sentBatch(machine.handle(.enqueue(Self.saves(100), now: .zero)))!
        #expect(first.changes.count == 100)
        // A transient failure first: counted.
        _ = machine.handle(.failed(.transient(TandemError(.unavailable, "busy"), retryAfter: nil), attempt: first.attempt, now: .zero))
        #expect(machine.retryCount == 1)
        let retried = Self.sentBatch(machine.handle(.tick(now: .seconds(1))))!
        let half = Self.sentBatch(machine.handle(.failed(.tooLarge(TandemError(.resourceExhausted, "too large")), attempt: retried.attempt, now: .seconds(1))))!
        #expect(half.changes.map(\.recordID) == (0..<50).map { "r\($0)" })
        #expect(machine.retryCount == 0, "a replaced operation starts with no failure counted")
        let other = Self.sentBatch(machine.handle(.succeeded(.sent(batch: half.batch), attempt: half.attempt, now: .seconds(1))))!
        #expect(other.changes.map(\.recordID) == (50..<100).map { "r\($0)" })
        _ = machine.handle(.succeeded(.sent(batch: other.batch), attempt: other.attempt, now: .seconds(1)))
        #expect(machine.batchLimit == 100, "back to the limit once the queue is empty")

        var single = Self.ready()
        let lone = Self.sentBatch(single.handle(.enqueue(Self.saves(1), now: .zero)))!
        let actions = single.handle(.failed(.tooLarge(TandemError(.resourceExhausted, "too large")), attempt: lone.attempt, now: .zero))
        #expect(actions == [.halted(TandemError(.resourceExhausted, "too large"))])
        #expect(single.pendingCount == 1, "halting keeps the record queued")
    }

    @Test("a fetch with more to come fetches its next page first; a fetch for a token already queued is ignored")
    func hasMoreChains() {
        var machine = Self.ready()
        var actions = machine.handle(.fetch(nil, now: .zero))
        #expect(Self.run(actions)?.0 == .fetch(token: nil))
        #expect(machine.handle(.fetch(nil, now: .zero)).isEmpty, "the same token is running")
        _ = machine.handle(.fetch(ChangeToken(3), now: .zero))
        _ = machine.handle(.fetch(ChangeToken(3), now: .zero))
        #expect(machine.fetches == [ChangeToken(3)])
        actions = machine.handle(.succeeded(.fetched(token: ChangeToken(100), hasMore: true), attempt: 2, now: .zero))
        #expect(actions == [.persist, .run(.fetch(token: ChangeToken(100)), attempt: 3)])
        actions = machine.handle(.succeeded(.fetched(token: ChangeToken(200), hasMore: false), attempt: 3, now: .zero))
        #expect(actions == [.persist, .run(.fetch(token: ChangeToken(3)), attempt: 4)])
        #expect(machine.token == ChangeToken(200))
        // A push fetches after the latest token.
        _ = machine.handle(.succeeded(.fetched(token: ChangeToken(250), hasMore: false), attempt: 4, now: .zero))
        #expect(Self.run(machine.handle(.pushed(now: .zero)))?.0 == .fetch(token: ChangeToken(250)))
    }

    @Test("a push while a fetch runs (which may have read its page before the change) fetches again after it, from the new token")
    func pushDuringFetch() {
        var machine = Self.ready()
        let actions = machine.handle(.pushed(now: .zero))
        #expect(Self.run(actions)?.0 == .fetch(token: nil))
        #expect(machine.handle(.pushed(now: .zero)).isEmpty)
        let after = machine.handle(.succeeded(.fetched(token: ChangeToken(10), hasMore: false), attempt: 2, now: .zero))
        #expect(after == [.persist, .run(.fetch(token: ChangeToken(10)), attempt: 3)])
        #expect(machine.handle(.succeeded(.fetched(token: ChangeToken(11), hasMore: false), attempt: 3, now: .zero)) == [.persist], "once")
    }

    @Test("an expired token is reset and the fetch starts over from the beginning")
    func tokenExpiry() {
        var machine = Self.ready()
        let actions = machine.handle(.fetch(ChangeToken(7), now: .zero))
        #expect(Self.run(actions)?.0 == .fetch(token: ChangeToken(7)))
        let restarted = machine.handle(.failed(.tokenExpired, attempt: 2, now: .zero))
        #expect(restarted == [.tokenReset, .persist, .run(.fetch(token: nil), attempt: 3)])
        #expect(machine.token == nil)
    }

    @Test("a fetch from the beginning refused as too old is not sent again at once: it waits a growing backoff (a push meanwhile fetches nothing), and after maxRetries the engine halts")
    func refusedFromTheBeginningBacksOff() {
        var machine = Self.ready()
        #expect(Self.run(machine.handle(.pushed(now: .zero)))?.0 == .fetch(token: nil))
        var attempt = 2
        var now = Duration.zero
        var waits: [Duration] = []
        for failure in 1...5 {
            // No token to drop: nothing tells the app of a reset, again and again.
            let actions = machine.handle(.failed(.tokenExpired, attempt: attempt, now: now))
            guard actions.count == 1, case .wake(let at) = actions[0] else {
                Issue.record("refusal \(failure) did not wait: \(actions)")
                return
            }
            waits.append(at - now)
            #expect(machine.token == nil && machine.fetches == [nil])
            #expect(machine.handle(.pushed(now: now)).isEmpty, "a push while backing off fetches nothing")
            #expect(machine.handle(.tick(now: at - .milliseconds(1))).isEmpty, "nothing runs before the backoff ends")
            now = at
            let again = Self.run(machine.handle(.tick(now: now)))
            #expect(again?.0 == .fetch(token: nil), "the fetch from the beginning runs once the backoff ends")
            attempt = again?.1 ?? attempt
        }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16)])
        let halted = machine.handle(.failed(.tokenExpired, attempt: attempt, now: now))
        #expect(halted == [.halted(Machine.feedRefused)] && machine.isHalted)
        #expect(machine.fetches == [nil], "the fetch from the beginning stays queued for a start")
        #expect(Self.run(machine.handle(.start(now: now)))?.0 == .fetch(token: nil))
    }

    @Test("an expired token starts over from the beginning once, at once; refused again before that fetch reaches the feed's end, it waits a backoff; at the end, a later expiry starts over at once again")
    func expiryStartsOverOnce() {
        var machine = Self.ready()
        _ = machine.handle(.fetch(ChangeToken(7), now: .zero))
        var actions = machine.handle(.failed(.tokenExpired, attempt: 2, now: .zero))
        #expect(actions == [.tokenReset, .persist, .run(.fetch(token: nil), attempt: 3)], "the first expiry: from the beginning, at once")
        // Refused from the beginning too: a backoff, and the app is not told of a reset again.
        actions = machine.handle(.failed(.tokenExpired, attempt: 3, now: .seconds(2)))
        #expect(actions == [.wake(at: .seconds(3))])
        #expect(machine.retryCount == 1 && machine.token == nil)
        #expect(machine.handle(.tick(now: .seconds(3))) == [.run(.fetch(token: nil), attempt: 4)])
        // Served this time, a page with more to come; the next page is refused: it starts over from
        // the beginning again, after a backoff, not at once.
        actions = machine.handle(.succeeded(.fetched(token: ChangeToken(10), hasMore: true), attempt: 4, now: .seconds(3)))
        #expect(actions == [.persist, .run(.fetch(token: ChangeToken(10)), attempt: 5)])
        actions = machine.handle(.failed(.tokenExpired, attempt: 5, now: .seconds(3)))
        #expect(actions == [.tokenReset, .persist, .wake(at: .seconds(4))])
        #expect(machine.fetches == [nil] && machine.token == nil)
        actions = machine.handle(.tick(now: .seconds(4)))
        #expect(actions == [.run(.fetch(token: nil), attempt: 6)])
        // The feed's end: the next expiry starts over at once again.
        _ = machine.handle(.succeeded(.fetched(token: ChangeToken(12), hasMore: true), attempt: 6, now: .seconds(4)))
        _ = machine.handle(.succeeded(.fetched(token: ChangeToken(20), hasMore: false), attempt: 7, now: .seconds(4)))
        #expect(!machine.restarting && machine.retryCount == 0 && machine.token == ChangeToken(20))
        #expect(Self.run(machine.handle(.pushed(now: .seconds(5))))?.0 == .fetch(token: ChangeToken(20)))
        actions = machine.handle(.failed(.tokenExpired, attempt: 8, now: .seconds(5)))
        #expect(actions == [.tokenReset, .persist, .run(.fetch(token: nil), attempt: 9)])
    }

    @Test("resolved conflicts are sent next, before the rest of the queue; a record changed again meanwhile keeps its newer change; no resolution halts")
    func conflictResend() {
        var machine = Self.ready()
        let first = Self.sentBatch(machine.handle(.enqueue(Self.saves(2), now: .zero)))!
        _ = machine.handle(.enqueue(Self.saves(2, from: 5), now: .zero))
        // The server answered each record; r1 conflicted, and is resolved after the next send began.
        let second = Self.sentBatch(machine.handle(.succeeded(.sent(batch: first.batch), attempt: first.attempt, now: .zero)))!
        #expect(second.changes.map(\.recordID) == ["r5", "r6"])
        _ = machine.handle(.enqueue([Change(recordID: "r9", isDeletion: false, bytes: 1)], now: .zero))
        _ = machine.handle(.resolved([Change(recordID: "r1", isDeletion: false, bytes: 120), Change(recordID: "r9", isDeletion: false, bytes: 999)], now: .zero))
        #expect(machine.pending.map(\.recordID) == ["r1", "r9"])
        #expect(machine.pending.last?.bytes == 1, "the app's newer change of r9 stays")
        let third = Self.sentBatch(machine.handle(.succeeded(.sent(batch: second.batch), attempt: second.attempt, now: .zero)))!
        #expect(third.changes.map(\.recordID) == ["r1", "r9"])
        let halted = machine.handle(.unresolved(TandemError(.aborted, "no resolution")))
        #expect(halted == [.halted(TandemError(.aborted, "no resolution"))] && machine.isHalted)
        #expect(machine.pendingCount == 2, "the batch out when it halted is queued again")
    }

    @Test("transient failures retry with a growing backoff (never 0), or after the server's retryAfter; after maxRetries the engine halts, and only start resumes it")
    func retriesThenHalt() {
        var machine = Self.ready()
        var sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(1), now: .zero)))!
        var now = Duration.zero
        var waits: [Duration] = []
        for failure in 1...5 {
            let actions = machine.handle(.failed(.transient(TandemError(.unavailable, "down"), retryAfter: nil), attempt: sent.attempt, now: now))
            guard case .wake(let at)? = actions.first else {
                Issue.record("failure \(failure) scheduled no wake: \(actions)")
                return
            }
            waits.append(at - now)
            #expect(machine.handle(.tick(now: at - .milliseconds(1))).isEmpty, "nothing runs before the backoff ends")
            now = at
            sent = Self.sentBatch(machine.handle(.tick(now: now)))!
        }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16)])
        let halted = machine.handle(.failed(.transient(TandemError(.unavailable, "down"), retryAfter: nil), attempt: sent.attempt, now: now))
        #expect(halted == [.halted(TandemError(.unavailable, "down"))])
        #expect(machine.handle(.enqueue(Self.saves(1, from: 1), now: now)) == [.persist], "halted: queued, not run")
        #expect(machine.pendingCount == 2)
        let resumed = Self.sentBatch(machine.handle(.start(now: now)))!
        #expect(resumed.changes.count == 2 && machine.retryCount == 0)

        // The server's retryAfter is the wait; a zero one still waits.
        var other = Self.ready()
        let out = Self.sentBatch(other.handle(.enqueue(Self.saves(1), now: .zero)))!
        #expect(other.handle(.failed(.transient(TandemError(.unavailable, "busy"), retryAfter: .milliseconds(250)), attempt: out.attempt, now: .seconds(3)))
                == [.wake(at: .seconds(3) + .milliseconds(250))])
        let again = Self.sentBatch(other.handle(.tick(now: .seconds(3) + .milliseconds(250))))!
        #expect(other.handle(.failed(.transient(TandemError(.unavailable, "busy"), retryAfter: .zero), attempt: again.attempt, now: .seconds(4)))
                == [.wake(at: .seconds(4) + .milliseconds(1))])
    }

    @Test("while the connection is down nothing starts and a transient failure counts nothing (an hour offline never halts); back, the work runs at once, with the failures before it forgotten")
    func waitsForTheConnection() {
        var machine = Self.ready()
        var sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(1), now: .zero)))!
        // A failure heard before the connection's loss is a counted retry, with its backoff.
        #expect(machine.handle(.failed(.transient(TandemError(.unavailable, "down"), retryAfter: nil), attempt: sent.attempt, now: .zero)) == [.wake(at: .seconds(1))])
        #expect(machine.retryCount == 1)
        #expect(machine.handle(.connection(up: false, now: .milliseconds(10))).isEmpty)
        #expect(machine.handle(.tick(now: .seconds(1))).isEmpty, "the backoff's end starts nothing while down")
        #expect(machine.handle(.enqueue(Self.saves(1, from: 1), now: .seconds(2))) == [.persist])
        #expect(machine.handle(.fetch(nil, now: .seconds(2))).isEmpty)
        #expect(machine.handle(.tick(now: .seconds(3_600))).isEmpty, "an hour down: nothing tried, no halt")
        #expect(!machine.isHalted && machine.isRunning && machine.retryCount == 1)
        // Back: at once, whatever the backoff said, and the failures before it are forgotten.
        sent = Self.sentBatch(machine.handle(.connection(up: true, now: .seconds(3_601))))!
        #expect(sent.changes.map(\.recordID) == ["r0", "r1"] && machine.retryCount == 0)
        // Out when the connection goes again: its failure waits, uncounted, as many times as it happens.
        for round in 1...10 {
            #expect(machine.handle(.connection(up: false, now: .seconds(3_602))).isEmpty)
            #expect(machine.handle(.failed(.transient(TandemError(.unavailable, "Not connected"), retryAfter: nil), attempt: sent.attempt, now: .seconds(3_602))).isEmpty)
            #expect(machine.retryCount == 0 && !machine.isHalted, "round \(round)")
            sent = Self.sentBatch(machine.handle(.connection(up: true, now: .seconds(3_603))))!
            #expect(sent.changes.map(\.recordID) == ["r0", "r1"])
        }
        // A refusal the connection does not explain still halts while down.
        _ = machine.handle(.connection(up: false, now: .seconds(3_604)))
        #expect(machine.handle(.failed(.fatal(TandemError(.permissionDenied, "no")), attempt: sent.attempt, now: .seconds(3_604))) == [.halted(TandemError(.permissionDenied, "no"))])
        #expect(machine.pendingCount == 3)
    }

    @Test("a non-retryable error halts at once, keeping the queue")
    func fatalHalts() {
        var machine = Self.ready()
        let sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(3), now: .zero)))!
        let actions = machine.handle(.failed(.fatal(TandemError(.permissionDenied, "no")), attempt: sent.attempt, now: .zero))
        #expect(actions == [.halted(TandemError(.permissionDenied, "no"))])
        #expect(machine.pendingCount == 3 && !machine.isRunning && machine.haltError?.code == .permissionDenied)
        #expect(machine.handle(.tick(now: .seconds(100))).isEmpty)
    }

    @Test("rate limits widen the throttle between operations (from 1 s, doubling, at most 64 s); successes narrow it back to none")
    func throttle() {
        var limits = Machine.Limits()
        limits.maxRetries = 100
        var machine = Self.ready(limits)
        var sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(1), now: .zero)))!
        var now = Duration.zero
        var throttles: [Duration] = []
        for _ in 0..<8 {
            let actions = machine.handle(.failed(.rateLimited(TandemError(.resourceExhausted, "slow down"), retryAfter: .milliseconds(10)), attempt: sent.attempt, now: now))
            throttles.append(machine.throttle)
            guard case .wake(let at)? = actions.first else {
                Issue.record("no wake: \(actions)")
                return
            }
            #expect(at - now == machine.throttle, "the wait is at least the throttle")
            now = at
            sent = Self.sentBatch(machine.handle(.tick(now: now)))!
        }
        #expect(throttles == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32), .seconds(64), .seconds(64)])
        // Successes halve it; the next operation waits it out.
        var machine2 = Self.ready()
        var out = Self.sentBatch(machine2.handle(.enqueue(Self.saves(6), now: .zero)))!
        _ = machine2.handle(.failed(.rateLimited(TandemError(.resourceExhausted, "slow down"), retryAfter: nil), attempt: out.attempt, now: .zero))
        _ = machine2.handle(.failed(.rateLimited(TandemError(.resourceExhausted, "slow down"), retryAfter: nil), attempt: Self.sentBatch(machine2.handle(.tick(now: .seconds(1))))!.attempt, now: .seconds(1)))
        #expect(machine2.throttle == .seconds(2))
        now = .seconds(3)
        out = Self.sentBatch(machine2.handle(.tick(now: now)))!
        var decay: [Duration] = []
        for _ in 0..<6 {
            _ = machine2.handle(.enqueue(Self.saves(1, from: 100 + decay.count), now: now))
            let actions = machine2.handle(.succeeded(.sent(batch: out.batch), attempt: out.attempt, now: now))
            decay.append(machine2.throttle)
            if machine2.throttle > .zero {
                #expect(actions.last == .wake(at: now + machine2.throttle))
                now += machine2.throttle
                out = Self.sentBatch(machine2.handle(.tick(now: now)))!
            } else {
                out = Self.sentBatch(actions)!
            }
        }
        #expect(decay == [.seconds(1), .milliseconds(500), .milliseconds(250), .milliseconds(125), .zero, .zero])
    }

    @Test("a missing zone is made and subscribed again before the operation runs again; the subscription's end re-subscribes first")
    func zoneMissing() {
        var machine = Self.ready()
        let sent = Self.sentBatch(machine.handle(.enqueue(Self.saves(2), now: .zero)))!
        var actions = machine.handle(.failed(.zoneMissing, attempt: sent.attempt, now: .zero))
        #expect(actions == [.persist, .run(.createZone, attempt: 3)])
        actions = machine.handle(.succeeded(.zoneCreated, attempt: 3, now: .zero))
        #expect(actions == [.persist, .run(.subscribe, attempt: 4)])
        actions = machine.handle(.succeeded(.subscribed, attempt: 4, now: .zero))
        #expect(Self.sentBatch(actions)?.changes == sent.changes)
        _ = machine.handle(.succeeded(.sent(batch: Self.sentBatch(actions)!.batch), attempt: 5, now: .zero))
        #expect(machine.handle(.unsubscribed(now: .zero)) == [.run(.subscribe, attempt: 6)])
        #expect(machine.handle(.pushed(now: .zero)).isEmpty, "a push while not subscribed is not a fetch")
        #expect(machine.fetches.isEmpty)
    }
}

/// How the engine's shell reads a failure for its state machine.
@Suite("Change sync failures")
struct ChangeSyncFailureTests {
    struct Elsewhere: Error {}

    @Test("passing failures retry (after the server's retryAfter when given), a rate limit widens the throttle, a size refusal halves the batch, an expired token restarts a fetch, and the rest halt")
    func classification() {
        let busy = TandemError(.unavailable, "busy", retryAfter: .milliseconds(40))
        #expect(ChangeSyncEngine.classify(busy) == .transient(busy, retryAfter: .milliseconds(40)))
        #expect(ChangeSyncEngine.classify(TandemError(.aborted, "behind another")) == .transient(TandemError(.aborted, "behind another"), retryAfter: nil))
        let rate = TandemError(.resourceExhausted, "slow down", retryAfter: .milliseconds(5))
        #expect(ChangeSyncEngine.classify(rate) == .rateLimited(rate, retryAfter: .milliseconds(5)))
        let size = TandemError(.resourceExhausted, "The message is 11 MiB")
        #expect(ChangeSyncEngine.classify(size) == .tooLarge(size))
        #expect(ChangeSyncEngine.classify(TandemError(.outOfRange, "pruned"), fetching: true) == .tokenExpired)
        #expect(ChangeSyncEngine.classify(TandemError(.outOfRange, "pruned")) == .fatal(TandemError(.outOfRange, "pruned")))
        #expect(ChangeSyncEngine.classify(TandemError(.permissionDenied, "no")) == .fatal(TandemError(.permissionDenied, "no")))
        if case .transient = ChangeSyncEngine.classify(Elsewhere()) {} else { Issue.record("an error from elsewhere (the network) is retried") }
    }
}
