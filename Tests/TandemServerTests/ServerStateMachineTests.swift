import Foundation
import Synchronization
import HummingbirdWebSocket
import NIOCore
import Testing
import TandemCore
@testable import TandemServer
import TandemTesting

@Suite("Server state machines")
struct ServerStateMachineTests {
    func batch(_ version: UInt64) -> CommittedBatch {
        CommittedBatch(version: Version(version), changes: [.removal(try! DocumentPath("a/\(version)"), version: Version(version))])
    }

    /// The versions a decision delivers; nil when it delivers nothing.
    func versions(_ decision: DeliveryHold.Decision) -> [Version]? {
        if case .deliver(let batches) = decision { return batches.map(\.version) }
        return nil
    }

    func ms(_ value: Int) -> Duration { .milliseconds(value) }

    @Test("commits reported out of order come out in version order, none before the watermark passes it")
    func commitOrder() {
        var order = CommitOrder()
        // 3 commits before 2 is visible: held back.
        var released = order.receive(CommitNotice(batches: [batch(1), batch(3)], visibleThrough: 1))
        #expect(released.ready.map(\.version) == [1] && released.late == 0)
        released = order.receive(CommitNotice(batches: [batch(4)], visibleThrough: 1))
        #expect(released.ready.isEmpty && order.waitingCount == 2)
        // 2 arrives and the watermark passes 4: 2, 3, 4 in order.
        released = order.receive(CommitNotice(batches: [batch(2)], visibleThrough: 4))
        #expect(released.ready.map(\.version) == [2, 3, 4] && order.waitingCount == 0)
        // A version that took no batch (a no-op commit) moves the watermark alone.
        released = order.receive(CommitNotice(batches: [], visibleThrough: 5))
        #expect(released.ready.isEmpty && order.watermark == 5)
        // A batch at or below the watermark breaks the contract: released at once, and counted.
        released = order.receive(CommitNotice(batches: [batch(5)], visibleThrough: 5))
        #expect(released.ready.map(\.version) == [5] && released.late == 1)
    }

    @Test("batches go out at once from an idle store, and wait for the notice a busy store promises, a few notices at most")
    func deliveryHold() {
        var hold = DeliveryHold(limit: 2)
        var asked = 0
        var busy = false
        let underWay = { () -> Bool in asked += 1; return busy }
        // Idle: at once.
        #expect(versions(hold.receive([batch(1)], now: .zero, commitsUnderWay: underWay)) == [1])
        // Nothing to deliver: the store is not asked (asking costs it a notice).
        #expect(hold.receive([], now: .zero, commitsUnderWay: underWay) == .wait && asked == 1)
        // Busy: held for two notices, then out together, in order.
        busy = true
        #expect(hold.receive([batch(2)], now: .zero, commitsUnderWay: underWay) == .wait)
        #expect(hold.receive([batch(3)], now: .zero, commitsUnderWay: underWay) == .wait && hold.heldCount == 2)
        #expect(versions(hold.receive([batch(4)], now: .zero, commitsUnderWay: underWay)) == [2, 3, 4])
        // The store's promised notice may release nothing new: what was held goes once it is idle.
        #expect(hold.receive([batch(5)], now: .zero, commitsUnderWay: underWay) == .wait)
        busy = false
        #expect(versions(hold.receive([], now: .zero, commitsUnderWay: underWay)) == [5] && hold.heldCount == 0)
    }

    @Test("under sustained load deliveries are paced, at most one an interval; below the load, or once it passes, at once")
    func deliveryPacing() {
        var hold = DeliveryHold(limit: 0, pacing: FanOutPacing(interval: .milliseconds(5), busyCommits: 3))
        let idle = { () -> Bool in false }
        // Two commits within an interval: below the load, each at once.
        #expect(versions(hold.receive([batch(1)], now: ms(0), commitsUnderWay: idle)) == [1])
        #expect(versions(hold.receive([batch(2)], now: ms(1), commitsUnderWay: idle)) == [2])
        // The third within 5 ms is load: it waits until 5 ms after the last delivery (at 1 ms).
        #expect(hold.receive([batch(3)], now: ms(2), commitsUnderWay: idle) == .waitUntil(ms(6)))
        // Notices meanwhile join it; asked before the time, it still waits.
        #expect(hold.receive([batch(4), batch(5)], now: ms(4), commitsUnderWay: idle) == .waitUntil(ms(6)))
        #expect(hold.heldCount == 3)
        // At the time, everything held goes together, in order.
        #expect(versions(hold.receive([], now: ms(6), commitsUnderWay: idle)) == [3, 4, 5])
        // Still under load (three commits in the last 5 ms): the next waits for 11 ms.
        #expect(hold.receive([batch(6)], now: ms(7), commitsUnderWay: idle) == .waitUntil(ms(11)))
        #expect(versions(hold.receive([], now: ms(11), commitsUnderWay: idle)) == [6])
        // The load gone (no commit in the last interval), a commit goes at once again.
        #expect(versions(hold.receive([batch(7)], now: ms(30), commitsUnderWay: idle)) == [7])
        // Nothing held: nothing to wait for, however busy.
        #expect(hold.receive([], now: ms(31), commitsUnderWay: idle) == .wait)
    }

    @Test("under sustained load a delivery that reached no listener does not count for the pacing: commits no one listens to never delay those someone does")
    func pacingSkipsUnheardDeliveries() {
        var hold = DeliveryHold(limit: 0, pacing: FanOutPacing(interval: .milliseconds(5), busyCommits: 3))
        let idle = { () -> Bool in false }
        #expect(versions(hold.receive([batch(1)], now: ms(0), commitsUnderWay: idle)) == [1])
        #expect(versions(hold.receive([batch(2)], now: ms(1), commitsUnderWay: idle)) == [2])
        // Under load: due 5 ms after the delivery at 1 ms.
        #expect(hold.receive([batch(3)], now: ms(2), commitsUnderWay: idle) == .waitUntil(ms(6)))
        #expect(versions(hold.receive([], now: ms(6), commitsUnderWay: idle)) == [3])
        // That one reached no listener: the next is due 5 ms after the one at 1 ms, so at once.
        hold.reachedNoListener()
        #expect(versions(hold.receive([batch(4)], now: ms(7), commitsUnderWay: idle)) == [4])
        // This one did: under load still, the next waits for 12 ms.
        #expect(hold.receive([batch(5), batch(6)], now: ms(8), commitsUnderWay: idle) == .waitUntil(ms(12)))
    }

    @Test("a group commit drain asked whether it runs promises one more report: a group told to report, or the idle call")
    func groupCommitPromise() async throws {
        let queue = GroupCommitQueue<Int, Int>()
        #expect(!queue.promiseReport())
        let reports = Locked<[String]>([])
        let idle = Ticket<Void>()
        let answer = try await queue.submit(7) {
            Task {
                queue.drain { requests, mustReport in
                    reports.withLock { $0.append("group \(requests) report \(mustReport)") }
                    // Asked while the group commits: the drain owes one more report.
                    #expect(queue.promiseReport())
                    return requests.map { .success($0 * 2) }
                } idle: {
                    reports.withLock { $0.append("idle") }
                    idle.fulfill(.success(()))
                }
            }
        }
        #expect(answer == 14)
        // The drain answers before it looks for more work and finds none: its last report comes
        // after the answer.
        try await idle.value()
        #expect(reports.withLock { $0 } == ["group [7] report false", "idle"])
        #expect(!queue.promiseReport())
    }

    func write(_ sequence: UInt64?..., writer: String = "c") -> [Mutation] {
        sequence.map { sequence in
            let mutation = Mutation.set(try! DocumentPath("a/b"), [:])
            return sequence.map { mutation.identified(by: MutationID(clientID: writer, sequence: $0)) } ?? mutation
        }
    }

    @Test("after a write refused for a passing reason, later writes are aborted until it is sent again")
    func sequencer() {
        var limits = ServerLimits()
        limits.maximumPendingWritesPerConnection = 2
        limits.maximumWritesPerSecond = 1_000
        var sequencer = WriteSequencer(limits: limits)
        #expect(sequencer.arrive(write(1), at: .zero) == .proceed)
        #expect(sequencer.arrive(write(2), at: .zero) == .proceed)
        // The queue is full: 3 is refused, and 4 may not overtake it.
        guard case .refuse(let full) = sequencer.arrive(write(3), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(full.code == .unavailable)
        sequencer.answered(write(1), forGood: true)
        guard case .refuse(let aborted) = sequencer.arrive(write(4), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(aborted.code == .aborted && aborted.message.contains("c#3"))
        // A write without ids carries no order.
        #expect(sequencer.arrive(write(nil), at: .zero) == .proceed)
        sequencer.answered(write(2), forGood: true)
        // 3 again clears the way.
        #expect(sequencer.arrive(write(3), at: .zero) == .proceed)
        sequencer.answered(write(nil), forGood: true)
        #expect(sequencer.arrive(write(4), at: .zero) == .proceed)
        #expect(sequencer.blockedFrom(writer: "c") == nil && !sequencer.isBlocked)
    }

    @Test("admission: connections counted per user and per anonymous address, given back on release; a write bucket per user and per anonymous address, refilled on the clock")
    func admissionQuotas() throws {
        var limits = ServerLimits()
        limits.maximumConnectionsPerUser = 1
        limits.maximumConnectionsPerAddress = 2
        limits.maximumWritesPerSecondPerUser = 2
        let time = Mutex(Duration.zero)
        let admission = Admission(limits: limits, now: { time.withLock { $0 } })
        let ada = Principal(identity: .user(AuthenticatedUser(uid: "ada")), device: "phone", address: "10.0.0.1")
        let bob = Principal(identity: .user(AuthenticatedUser(uid: "bob")), device: "phone", address: "10.0.0.1")
        let stranger = Principal(device: "a", address: "10.0.0.1")
        let anotherStranger = Principal(device: "b", address: "10.0.0.1")
        let seat = try #require(try admission.seat(ada))
        #expect(throws: TandemError.self) { try admission.seat(ada) }
        _ = try admission.seat(bob)
        admission.release(seat)
        _ = try admission.seat(ada)
        // Anonymous connections count against their address, whatever device they say.
        _ = try admission.seat(stranger)
        _ = try admission.seat(anotherStranger)
        #expect(throws: TandemError.self) { try admission.seat(Principal(device: "c", address: "10.0.0.1")) }
        _ = try admission.seat(Principal(device: "c", address: "10.0.0.2"))
        #expect(admission.openConnections(of: .address("10.0.0.1")) == 2)
        #expect(try admission.seat(Principal(device: "in-process")) == nil, "no one to count it against")

        #expect(admission.admitWrites(2, from: ada) == nil)
        let refusal = admission.admitWrites(1, from: ada)
        #expect(refusal?.code == .resourceExhausted && refusal?.retryAfter == .milliseconds(500))
        #expect(admission.admitWrites(2, from: bob) == nil)
        #expect(admission.admitWrites(2, from: stranger) == nil)
        #expect(admission.admitWrites(1, from: anotherStranger)?.code == .resourceExhausted, "one bucket per anonymous address")
        time.withLock { $0 = .milliseconds(500) }
        #expect(admission.admitWrites(1, from: ada) == nil)
    }

    @Test("admission of a WebSocket message and write: size and rate on the bytes before parsing; a write refused by its caller's rate holds back its writer's later writes")
    func admissionOnAConnection() {
        var limits = ServerLimits()
        limits.maximumRequestBytes = 100
        limits.maximumMessagesPerSecond = 2
        limits.maximumWritesPerSecondPerUser = 1
        limits.maximumBatchWrites = 2
        let time = Mutex(Duration.zero)
        let admission = Admission(limits: limits, now: { time.withLock { $0 } })
        var connection = Admission.ConnectionCounters(limits: limits)
        #expect(admission.admitMessage(bytes: 101, on: &connection)?.code == .resourceExhausted)
        #expect(admission.admitMessage(bytes: 10, on: &connection) == nil)
        #expect(admission.admitMessage(bytes: 10, on: &connection) == nil)
        #expect(admission.admitMessage(bytes: 10, on: &connection)?.retryAfter == .milliseconds(500))

        let ada = Principal(identity: .user(AuthenticatedUser(uid: "ada")), device: "phone")
        #expect(admission.admitWrites(write(1), each: false, from: ada, on: &connection) == .proceed)
        guard case .refuse(let refusal) = admission.admitWrites(write(2), each: false, from: ada, on: &connection) else {
            Issue.record("the user's second write in a second is refused")
            return
        }
        #expect(refusal.code == .resourceExhausted && refusal.retryAfter != nil)
        time.withLock { $0 = .seconds(5) }
        guard case .refuse(let held) = admission.admitWrites(write(3), each: false, from: ada, on: &connection) else {
            Issue.record("a later write of the same writer waits for the refused one")
            return
        }
        #expect(held.code == .aborted)
        #expect(admission.admitWrites(write(2, 3), each: false, from: ada, on: &connection) == .proceed, "sent again in order")
        #expect(admission.admitWrites(write(4, 5, 6), each: true, from: ada, on: &connection) != .proceed, "more mutations than a request may hold")
    }

    @Test("a store failure blocks the writes queued after it at their turn; the rate limit refuses on the clock")
    func sequencerTurnsAndRate() {
        var limits = ServerLimits()
        limits.maximumWritesPerSecond = 2
        var sequencer = WriteSequencer(limits: limits)
        #expect(sequencer.arrive(write(1), at: .zero) == .proceed)
        #expect(sequencer.arrive(write(2), at: .zero) == .proceed)
        // Over two a second: refused, until half a second passes on the clock.
        guard case .refuse(let rate) = sequencer.arrive(write(3), at: .milliseconds(100)) else { Issue.record("expected a refusal"); return }
        #expect(rate.code == .resourceExhausted && rate.message.contains("2 writes a second"))
        // 0.2 of a write back in the bucket at 100 ms: the missing 0.8 comes in 400 ms.
        #expect(rate.retryAfter == .milliseconds(400) && !rate.isPermanent)
        #expect(sequencer.arrive(write(3), at: .milliseconds(600)) == .proceed)
        // 1 failed in the store: 2 and 3, queued after it, are aborted at their turn.
        #expect(sequencer.turn(write(1)) == .proceed)
        sequencer.failed(write(1))
        sequencer.answered(write(1), forGood: false)
        guard case .refuse(let aborted) = sequencer.turn(write(2)) else { Issue.record("expected a refusal"); return }
        #expect(aborted.code == .aborted)
        #expect(sequencer.blockedFrom(writer: "c") == MutationID(clientID: "c", sequence: 1))
    }

    @Test("one writer's refusal blocks that writer alone; a request refused whole blocks each writer in it")
    func sequencerPerWriter() {
        var limits = ServerLimits()
        limits.maximumWritesPerSecond = 1_000
        var sequencer = WriteSequencer(limits: limits)
        // Writer a's 1 fails in the store: a's 2 is aborted, b goes on.
        #expect(sequencer.arrive(write(1, writer: "a"), at: .zero) == .proceed)
        #expect(sequencer.turn(write(1, writer: "a")) == .proceed)
        sequencer.failed(write(1, writer: "a"))
        sequencer.answered(write(1, writer: "a"), forGood: false)
        guard case .refuse(let aborted) = sequencer.arrive(write(2, writer: "a"), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(aborted.code == .aborted && aborted.message.contains("a#1"))
        #expect(sequencer.arrive(write(7, writer: "b"), at: .zero) == .proceed)
        #expect(sequencer.turn(write(7, writer: "b")) == .proceed)
        sequencer.answered(write(7, writer: "b"), forGood: true)
        // A request with writes of a (blocked) and b is refused whole, so b is blocked from its write in it.
        let mixed = write(3, writer: "a") + write(8, writer: "b")
        guard case .refuse = sequencer.arrive(mixed, at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(sequencer.blockedFrom(writer: "b") == MutationID(clientID: "b", sequence: 8))
        guard case .refuse = sequencer.arrive(write(9, writer: "b"), at: .zero) else { Issue.record("expected a refusal"); return }
        // Sent again in order, each refused write clears its own block, the next one holding still.
        #expect(sequencer.arrive(write(1, writer: "a"), at: .zero) == .proceed)
        #expect(sequencer.blockedFrom(writer: "a") == MutationID(clientID: "a", sequence: 2))
        #expect(sequencer.arrive(write(2, writer: "a"), at: .zero) == .proceed)
        #expect(sequencer.arrive(mixed, at: .zero) == .proceed)
        #expect(sequencer.blockedFrom(writer: "a") == nil && sequencer.blockedFrom(writer: "b") == MutationID(clientID: "b", sequence: 9))
        #expect(sequencer.arrive(write(9, writer: "b"), at: .zero) == .proceed)
        #expect(!sequencer.isBlocked)
    }

    @Test("a block never waits for a write already answered; only a request spanning the blocked write lifts it")
    func sequencerSettled() {
        var limits = ServerLimits()
        limits.maximumPendingWritesPerConnection = 1
        limits.maximumWritesPerSecond = 1_000
        var sequencer = WriteSequencer(limits: limits)
        // 1 is queued; sent again before its answer, it finds the queue full: c is blocked from 1.
        #expect(sequencer.arrive(write(1), at: .zero) == .proceed)
        guard case .refuse(let full) = sequencer.arrive(write(1), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(full.code == .unavailable && sequencer.blockedFrom(writer: "c") == MutationID(clientID: "c", sequence: 1))
        // The first send commits: the client has its answer and will not send 1 a third time, so
        // nothing may wait for it.
        #expect(sequencer.turn(write(1)) == .proceed)
        sequencer.answered(write(1), forGood: true)
        #expect(!sequencer.isBlocked)
        // 1 sent again after its answer, refused as the queue is full: it blocks nothing.
        #expect(sequencer.arrive(write(2), at: .zero) == .proceed)
        guard case .refuse(let again) = sequencer.arrive(write(1), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(again.code == .unavailable && !sequencer.isBlocked)
        sequencer.answered(write(2), forGood: true)
        // 3 queued, 4 refused: c is blocked from 4, and 3's answer does not lift that.
        #expect(sequencer.arrive(write(3), at: .zero) == .proceed)
        guard case .refuse = sequencer.arrive(write(4), at: .zero) else { Issue.record("expected a refusal"); return }
        sequencer.answered(write(3), forGood: true)
        #expect(sequencer.blockedFrom(writer: "c") == MutationID(clientID: "c", sequence: 4))
        // A write below the block sent again (a replay) goes through without lifting it.
        #expect(sequencer.arrive(write(2), at: .zero) == .proceed)
        sequencer.answered(write(2), forGood: true)
        #expect(sequencer.blockedFrom(writer: "c") == MutationID(clientID: "c", sequence: 4))
        guard case .refuse(let aborted) = sequencer.arrive(write(5), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(aborted.code == .aborted)
        // 4 and 5 sent again together lift it.
        #expect(sequencer.arrive(write(4, 5), at: .zero) == .proceed)
        #expect(!sequencer.isBlocked)
        sequencer.answered(write(4, 5), forGood: true)
        // 6-7 queued, sent again and refused (blocked from 6), then 8 aborted behind it. The first
        // send of 6-7 applies, clearing 6: 8, refused meanwhile, still holds back what follows it.
        #expect(sequencer.arrive(write(6, 7), at: .zero) == .proceed)
        guard case .refuse = sequencer.arrive(write(6, 7), at: .zero) else { Issue.record("expected a refusal"); return }
        guard case .refuse = sequencer.arrive(write(8), at: .zero) else { Issue.record("expected a refusal"); return }
        #expect(sequencer.turn(write(6, 7)) == .proceed)
        sequencer.answered(write(6, 7), forGood: true)
        #expect(sequencer.blockedFrom(writer: "c") == MutationID(clientID: "c", sequence: 8))
        guard case .refuse(let behind) = sequencer.arrive(write(9), at: .zero) else { Issue.record("9 applied ahead of 8"); return }
        #expect(behind.code == .aborted && behind.message.contains("c#8"))
        #expect(sequencer.arrive(write(8), at: .zero) == .proceed)
        sequencer.answered(write(8), forGood: true)
        #expect(sequencer.arrive(write(9), at: .zero) == .proceed)
        #expect(!sequencer.isBlocked)
    }

    @Test("a request with more writes than the rate allows a second is admitted once the bucket is full")
    func sequencerLargeRequest() {
        var limits = ServerLimits()
        limits.maximumWritesPerSecond = 2
        var sequencer = WriteSequencer(limits: limits)
        let five = write(1, 2, 3, 4, 5)
        #expect(sequencer.arrive(five, at: .zero) == .proceed)
        guard case .refuse(let rate) = sequencer.arrive(write(6), at: .milliseconds(100)) else { Issue.record("expected a refusal"); return }
        #expect(rate.code == .resourceExhausted && rate.retryAfter != nil)
        #expect(sequencer.arrive(write(6), at: .seconds(1)) == .proceed)
    }


    @Test("frames are put back together into messages; an oversized or binary message is refused and the next one read")
    func messageReader() {
        var reader = MessageReader(limit: 10)
        guard case .incomplete = reader.read(.text, ByteBuffer(string: "{\"a\""), fin: false) else { Issue.record("expected incomplete"); return }
        guard case .text(let whole) = reader.read(.continuation, ByteBuffer(string: ":1}"), fin: true) else { Issue.record("expected a message"); return }
        #expect(String(buffer: whole) == "{\"a\":1}")
        _ = reader.read(.text, ByteBuffer(string: "0123456"), fin: false)
        _ = reader.read(.continuation, ByteBuffer(string: "789ab"), fin: false)
        guard case .refused(let big, _) = reader.read(.continuation, ByteBuffer(string: "cdef"), fin: true) else { Issue.record("expected a refusal"); return }
        #expect(big.code == .resourceExhausted && big.message.contains("16 bytes"))
        guard case .refused(let binary, _) = reader.read(.binary, ByteBuffer(string: "xyz"), fin: true) else { Issue.record("expected a refusal"); return }
        #expect(binary.code == .invalidArgument)
        guard case .text(let next) = reader.read(.text, ByteBuffer(string: "{}"), fin: true) else { Issue.record("expected the next message"); return }
        #expect(String(buffer: next) == "{}")
    }

    @Test("the memory store prunes on its own clock, at its interval")
    func memoryStorePrunes() async throws {
        let clock = ManualClock()
        var configuration = MemoryServerStore<ManualClock>.Configuration()
        configuration.pruneInterval = .seconds(60)
        configuration.tombstoneRetention = .zero
        let now = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        configuration.now = { now.value }
        let store = MemoryServerStore(clock: clock, configuration: configuration)
        _ = try await store.commit([.set(try DocumentPath("a/b"), [:])])
        _ = try await store.commit([.delete(try DocumentPath("a/b"))])
        let running = Task { try await store.run() }
        await clock.waitForSleepers(count: 1)
        now.value = now.value.addingTimeInterval(1)
        clock.advance(by: .seconds(60))
        // Pruned once the clock passed the interval: the next sleep shows the pruning ran.
        await clock.waitForSleepers(count: 1)
        let pruned = await #expect(throws: TandemError.self) { _ = try await store.changes(since: 1, in: nil, limit: 10) }
        #expect(pruned?.code == .outOfRange)
        running.cancel()
        _ = try? await running.value
    }

    @Test("a write rate meant as unlimited (Int.max) admits writes instead of trapping")
    func unlimitedRate() {
        var limiter = RateLimiter(perSecond: .max)
        let first = limiter.admit(500, at: .zero), second = limiter.admit(1, at: .zero)
        #expect(first && second)
        #expect(limiter.wait(for: 1) == .zero)
        var tight = RateLimiter(perSecond: 2)
        let whole = tight.admit(5, at: .zero), more = tight.admit(1, at: .zero)
        #expect(whole, "a request larger than the bucket takes it whole")
        #expect(!more)
        #expect(tight.wait(for: 1) == .milliseconds(500))
    }
}
