import Testing
import TandemCore
@testable import Tandem

@Suite("ListenerStateMachine")
struct ListenerStateMachineTests {
    /// 2, 4, 8 s, without jitter unless a test says so.
    let policy = RetryPolicy(initial: .seconds(2), maximum: .seconds(8))

    @Test("a start attaches from the saved version; the first batch makes it live and lets the start go on")
    func attachAndFirstBatch() {
        var machine = ListenerStateMachine(policy: policy, resumeVersion: 7)
        #expect(machine.start() == [.attach(attempt: 1, resumeFrom: 7)])
        #expect(machine.phase == .attaching(attempt: 1))
        #expect(machine.isUp && machine.isRunning)
        // A second start while attaching waits for the same first batch.
        #expect(machine.start() == [])
        machine.applied(version: 9)
        #expect(machine.delivered(attempt: 1) == [.up, .settleStarts])
        #expect(machine.phase == .live(attempt: 1))
        #expect(machine.resumeVersion == 9)
        // Later batches change only the version.
        machine.applied(version: 10)
        #expect(machine.delivered(attempt: 1) == [])
        // A start of a live listener goes on at once.
        #expect(machine.start() == [.settleStarts])
    }

    @Test("failures back off by the policy, each retry resumes from the last version, and a delivery resets the count")
    func backoff() {
        var machine = ListenerStateMachine(policy: policy)
        _ = machine.start()
        #expect(machine.failed(attempt: 1, now: .seconds(1), random: 0.5) == [.settleStarts, .sleep(until: .seconds(3))])
        #expect(machine.phase == .down(until: .seconds(3)))
        #expect(!machine.isUp && machine.isRunning)
        // Not yet due.
        #expect(machine.retryDue(now: .seconds(2)) == [])
        #expect(machine.retryDue(now: .seconds(3)) == [.attach(attempt: 2, resumeFrom: nil)])
        #expect(machine.failed(attempt: 2, now: .seconds(3), random: 0.5) == [.settleStarts, .sleep(until: .seconds(7))])
        #expect(machine.failures == 2)
        _ = machine.retryDue(now: .seconds(7))
        machine.applied(version: 4)
        _ = machine.delivered(attempt: 3)
        #expect(machine.failures == 0)
        // A live listener that fails starts counting again, and resumes from its version.
        #expect(machine.failed(attempt: 3, now: .seconds(20), random: 0.5) == [.settleStarts, .sleep(until: .seconds(22))])
        #expect(machine.retryDue(now: .seconds(22)) == [.attach(attempt: 4, resumeFrom: 4)])
    }

    @Test("a lost connection takes a running listener offline, without a failure or a backoff; its return attaches at once, resuming")
    func followsTheConnection() {
        var machine = ListenerStateMachine(policy: policy, resumeVersion: 3)
        _ = machine.start()
        machine.applied(version: 5)
        _ = machine.delivered(attempt: 1)
        // Live: the stream goes, and the listener waits for the connection.
        #expect(machine.disconnected() == [.detach(attempt: 1), .settleStarts])
        #expect(machine.phase == .offline && machine.isRunning && !machine.isUp)
        #expect(machine.failures == 0)
        // The stream's own failure, after the event, changes nothing.
        #expect(machine.failed(attempt: 1, now: .seconds(1), random: 0.5) == [])
        #expect(machine.resumed() == [.attach(attempt: 2, resumeFrom: 5)])
        #expect(machine.phase == .attaching(attempt: 2))

        // The failure comes first, then the event: the backoff it started ends.
        #expect(machine.failed(attempt: 2, now: .seconds(2), random: 0.5) == [.settleStarts, .sleep(until: .seconds(4))])
        #expect(machine.disconnected() == [.cancelSleep, .settleStarts])
        #expect(machine.phase == .offline)
        // While the connection is down, a start or a wake tries (its listen wakes the connection);
        // failing then counts nothing and sleeps nothing.
        #expect(machine.start() == [.attach(attempt: 3, resumeFrom: 5)])
        #expect(machine.failed(attempt: 3, now: .seconds(3), random: 0.5) == [.settleStarts])
        #expect(machine.phase == .offline)
        #expect(machine.wake() == [.attach(attempt: 4, resumeFrom: 5)])
        #expect(machine.failed(attempt: 4, now: .seconds(3), random: 0.5) == [.settleStarts])
        // A stopped listener stays stopped through the connection's changes.
        #expect(machine.stop() == [])
        #expect(machine.resumed() == [])
        #expect(machine.disconnected() == [])
        #expect(machine.phase == .stopped)
        // A return of the connection also ends a backoff under way.
        _ = machine.resumed()
        _ = machine.start()
        #expect(machine.failed(attempt: 5, now: .seconds(5), random: 0.5) == [.settleStarts, .sleep(until: .seconds(7))])
        #expect(machine.resumed() == [.cancelSleep, .attach(attempt: 6, resumeFrom: 5)])
        _ = machine.stop()
        // Back, failures back off again.
        _ = machine.resumed()
        _ = machine.start()
        #expect(machine.failed(attempt: 7, now: .seconds(10), random: 0.5) == [.settleStarts, .sleep(until: .seconds(12))])
    }

    @Test("the retry policy's jitter is placed by the random number it is given")
    func jitter() {
        let jittery = RetryPolicy(initial: .seconds(10), maximum: .seconds(10), jitter: 0.5)
        var low = ListenerStateMachine(policy: jittery)
        var high = ListenerStateMachine(policy: jittery)
        _ = low.start()
        _ = high.start()
        #expect(low.failed(attempt: 1, now: .zero, random: 0) == [.settleStarts, .sleep(until: .seconds(5))])
        #expect(high.failed(attempt: 1, now: .zero, random: 0.75) == [.settleStarts, .sleep(until: .milliseconds(12_500))])
    }

    @Test("a read, a write or a reconnection wakes a listener that is down, and nothing else")
    func wake() {
        var machine = ListenerStateMachine(policy: policy)
        #expect(machine.wake() == [])  // stopped: a read does not start listening
        _ = machine.start()
        #expect(machine.wake() == [])  // attaching
        _ = machine.failed(attempt: 1, now: .zero, random: 0.5)
        #expect(machine.wake() == [.cancelSleep, .attach(attempt: 2, resumeFrom: nil)])
        // Woken, it keeps counting: a second failure waits longer.
        #expect(machine.failed(attempt: 2, now: .seconds(1), random: 0.5) == [.settleStarts, .sleep(until: .seconds(5))])
        // The sleep that was cancelled ends late: nothing happens.
        #expect(machine.retryDue(now: .seconds(2)) == [])
    }

    @Test("a start of a listener waiting out its backoff attaches at once, counting failures anew")
    func startWakes() {
        var machine = ListenerStateMachine(policy: policy)
        _ = machine.start()
        _ = machine.failed(attempt: 1, now: .zero, random: 0.5)
        _ = machine.retryDue(now: .seconds(2))
        _ = machine.failed(attempt: 2, now: .seconds(2), random: 0.5)
        #expect(machine.failures == 2)
        #expect(machine.start() == [.cancelSleep, .attach(attempt: 3, resumeFrom: nil)])
        #expect(machine.failed(attempt: 3, now: .seconds(3), random: 0.5) == [.settleStarts, .sleep(until: .seconds(5))])
    }

    @Test("a new query or document replaces the stream and starts from a snapshot")
    func restart() {
        var machine = ListenerStateMachine(policy: policy, resumeVersion: 3)
        _ = machine.start()
        machine.applied(version: 5)
        _ = machine.delivered(attempt: 1)
        #expect(machine.restart() == [.detach(attempt: 1), .attach(attempt: 2, resumeFrom: nil)])
        // The old stream's late events change nothing.
        machine.applied(version: 6)  // a batch applied before the switch took hold
        #expect(machine.delivered(attempt: 1) == [])
        #expect(machine.failed(attempt: 1, now: .zero, random: 0.5) == [])
        #expect(machine.phase == .attaching(attempt: 2))
        // Down, it cancels the sleep instead.
        _ = machine.failed(attempt: 2, now: .zero, random: 0.5)
        #expect(machine.restart() == [.cancelSleep, .attach(attempt: 3, resumeFrom: nil)])
        // Stopped, it just attaches.
        _ = machine.stop()
        #expect(machine.restart() == [.attach(attempt: 4, resumeFrom: nil)])
    }

    @Test("stop detaches the stream or cancels the sleep, lets a waiting start go on, and keeps the version")
    func stop() {
        var machine = ListenerStateMachine(policy: policy, resumeVersion: 2)
        #expect(machine.stop() == [])
        _ = machine.start()
        #expect(machine.stop() == [.detach(attempt: 1), .settleStarts])
        #expect(machine.phase == .stopped)
        _ = machine.start()
        _ = machine.delivered(attempt: 2)
        #expect(machine.stop() == [.detach(attempt: 2)])
        _ = machine.start()
        _ = machine.failed(attempt: 3, now: .zero, random: 0.5)
        #expect(machine.stop() == [.cancelSleep])
        // Its sleep ending late attaches nothing.
        #expect(machine.retryDue(now: .seconds(60)) == [])
        #expect(machine.start() == [.attach(attempt: 4, resumeFrom: 2)])
        machine.forgetResumeVersion()
        _ = machine.stop()
        #expect(machine.start() == [.attach(attempt: 5, resumeFrom: nil)])
    }

    @Test("when the policy gives up the listener stops, and a new start attaches again")
    func givesUp() {
        var machine = ListenerStateMachine(policy: RetryPolicy(initial: .seconds(1), maximum: .seconds(1), maximumAttempts: 1))
        _ = machine.start()
        #expect(machine.failed(attempt: 1, now: .zero, random: 0.5) == [.settleStarts, .sleep(until: .seconds(1))])
        _ = machine.retryDue(now: .seconds(1))
        #expect(machine.failed(attempt: 2, now: .seconds(1), random: 0.5) == [.settleStarts, .gaveUp(failures: 2)])
        #expect(machine.phase == .gaveUp)
        #expect(!machine.isRunning)
        #expect(machine.wake() == [])
        #expect(machine.start() == [.attach(attempt: 3, resumeFrom: nil)])
        #expect(machine.failures == 0)
    }
}
