import Testing
@testable import Tandem

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    /// 2, 4, 8 s between failed attempts, without jitter unless a test says so; 3 silent heartbeats allowed.
    func machine(_ policy: RetryPolicy = RetryPolicy(initial: .seconds(2), maximum: .seconds(8))) -> ConnectionStateMachine {
        ConnectionStateMachine(policy: policy, missedHeartbeatsAllowed: 3)
    }

    @Test("connect, hello on open, requests once welcomed, and every listener resumed then")
    func connectHelloWelcome() {
        var machine = machine()
        #expect(machine.setOnline(true) == [])  // not running yet: nothing connects
        #expect(machine.start() == [.connect(attempt: 1)])
        #expect(machine.start() == [])
        #expect(!machine.isConnected)
        #expect(machine.opened(attempt: 1) == [.sendHello])
        #expect(!machine.isConnected)  // hello sent, no welcome yet: requests wait
        #expect(machine.welcomed(attempt: 1) == [.resumeListeners])
        #expect(machine.isConnected)
        #expect(machine.phase == .connected(attempt: 1))
        // A second welcome on the same socket resumes nothing twice.
        #expect(machine.welcomed(attempt: 1) == [])
    }

    @Test("a heartbeat each interval; a socket silent for more than the allowed intervals is closed")
    func heartbeatDeadline() {
        var machine = machine()
        _ = machine.start()
        #expect(machine.heartbeatDue(attempt: 1) == [])  // still opening
        _ = machine.opened(attempt: 1)
        _ = machine.welcomed(attempt: 1)
        #expect(machine.heartbeatDue(attempt: 1) == [.sendHeartbeat])
        #expect(machine.heartbeatDue(attempt: 1) == [.sendHeartbeat])
        machine.heard(attempt: 1)  // any message resets the count
        for _ in 0..<3 { #expect(machine.heartbeatDue(attempt: 1) == [.sendHeartbeat]) }
        #expect(machine.heartbeatDue(attempt: 1) == [.close(attempt: 1)])
        // A late tick of a replaced socket does nothing.
        _ = machine.closed(attempt: 1, now: .seconds(10), random: 0.5)
        #expect(machine.heartbeatDue(attempt: 1) == [])
    }

    @Test("failed attempts back off by the policy; a welcomed socket that closes reconnects at once and resets the backoff")
    func reconnectBackoff() {
        var machine = machine()
        _ = machine.start()
        #expect(machine.closed(attempt: 1, now: .seconds(1), random: 0.5) == [.failPending, .sleep(until: .seconds(3), failures: 1)])
        #expect(machine.sleepEnded(now: .seconds(2)) == [])  // early: not due
        #expect(machine.sleepEnded(now: .seconds(3)) == [.connect(attempt: 2)])
        #expect(machine.closed(attempt: 2, now: .seconds(3), random: 0.5) == [.failPending, .sleep(until: .seconds(7), failures: 2)])
        _ = machine.sleepEnded(now: .seconds(7))
        _ = machine.opened(attempt: 3)
        _ = machine.welcomed(attempt: 3)
        #expect(machine.failures == 0)
        #expect(machine.closed(attempt: 3, now: .seconds(50), random: 0.5) == [.failPending, .connect(attempt: 4)])
        #expect(machine.closed(attempt: 4, now: .seconds(50), random: 0.5) == [.failPending, .sleep(until: .seconds(52), failures: 1)])
        // The late close of an old socket changes nothing.
        #expect(machine.closed(attempt: 2, now: .seconds(51), random: 0.5) == [])
    }

    @Test("an attempt whose socket has not opened by the connect timeout fails as if closed, also while it was being closed (offline, renewal); one that opened is not timed out; its socket opening late is closed")
    func connectTimeout() {
        var machine = machine()
        _ = machine.start()
        #expect(machine.connectTimedOut(attempt: 1, now: .seconds(10), random: 0.5) == [.failPending, .sleep(until: .seconds(12), failures: 1)])
        #expect(machine.opened(attempt: 1) == [], "opened late: closed by the shell, not used")
        #expect(machine.closed(attempt: 1, now: .seconds(11), random: 0.5) == [], "its late close changes nothing")
        #expect(machine.sleepEnded(now: .seconds(12)) == [.connect(attempt: 2)])

        // Opened in time: the timeout is for the opening only (heartbeats watch an open socket).
        _ = machine.opened(attempt: 2)
        #expect(machine.connectTimedOut(attempt: 2, now: .seconds(22), random: 0.5) == [])
        _ = machine.welcomed(attempt: 2)
        #expect(machine.connectTimedOut(attempt: 2, now: .seconds(22), random: 0.5) == [])
        #expect(machine.isConnected)

        // A renewal while opening waits for the socket to close; one that never opens ends at the
        // timeout, and the renewal connects at once.
        #expect(machine.closed(attempt: 2, now: .seconds(30), random: 0.5) == [.failPending, .connect(attempt: 3)])
        #expect(machine.renew() == [.close(attempt: 3)])
        #expect(machine.connectTimedOut(attempt: 3, now: .seconds(40), random: 0.5) == [.failPending, .connect(attempt: 4)])

        // Offline while opening: the timeout leaves it offline, where setOnline(true) connects.
        #expect(machine.setOnline(false) == [.close(attempt: 4), .failPending])
        #expect(machine.connectTimedOut(attempt: 4, now: .seconds(50), random: 0.5) == [.failPending])
        #expect(machine.phase == .offline)
        #expect(machine.setOnline(true) == [.connect(attempt: 5)])
        // A stale timer of an older attempt does nothing.
        #expect(machine.connectTimedOut(attempt: 4, now: .seconds(60), random: 0.5) == [])
    }

    @Test("the reconnect jitter is placed by the random number given")
    func jitter() {
        var machine = machine(RetryPolicy(initial: .seconds(10), maximum: .seconds(10), jitter: 0.5))
        _ = machine.start()
        #expect(machine.closed(attempt: 1, now: .zero, random: 0) == [.failPending, .sleep(until: .seconds(5), failures: 1)])
    }

    @Test("a request while waiting ends the sleep at once; the next attempt goes when the sleep ends")
    func wake() {
        var machine = machine()
        _ = machine.start()
        #expect(machine.wake() == [])  // connecting: nothing to wake
        _ = machine.closed(attempt: 1, now: .zero, random: 0.5)
        #expect(machine.wake() == [.endSleep])
        #expect(machine.wake() == [])  // once
        #expect(machine.sleepEnded(now: .seconds(1)) == [.connect(attempt: 2)])
    }

    @Test("offline closes the socket and stays away; online connects again")
    func offlineOnline() {
        var machine = machine()
        _ = machine.start()
        _ = machine.opened(attempt: 1)
        _ = machine.welcomed(attempt: 1)
        #expect(machine.setOnline(false) == [.close(attempt: 1), .failPending])
        #expect(!machine.isConnected, "requests fail at once while the socket closes")
        #expect(machine.closed(attempt: 1, now: .zero, random: 0.5) == [.failPending])
        #expect(machine.phase == .offline)
        #expect(machine.wake() == [])  // a request while offline does not connect
        #expect(machine.setOnline(true) == [.connect(attempt: 2)])
        // Offline while waiting ends the sleep, and the sleep's end connects nothing.
        _ = machine.closed(attempt: 2, now: .zero, random: 0.5)
        #expect(machine.setOnline(false) == [.endSleep])
        #expect(machine.sleepEnded(now: .seconds(60)) == [])
        #expect(machine.setOnline(true) == [.connect(attempt: 3)])
    }

    @Test("a server that breaks the protocol has its socket closed")
    func misbehaved() {
        var machine = machine()
        _ = machine.start()
        _ = machine.opened(attempt: 1)
        #expect(machine.misbehaved(attempt: 1) == [.close(attempt: 1)])
        #expect(machine.misbehaved(attempt: 7) == [])
    }

    @Test("stop closes the socket or ends the sleep, for good; a policy that gives up stops too")
    func stopAndGiveUp() {
        var connected = machine()
        _ = connected.start()
        _ = connected.opened(attempt: 1)
        #expect(connected.stop() == [.close(attempt: 1), .failPending])
        #expect(connected.isStopped)
        #expect(connected.closed(attempt: 1, now: .zero, random: 0.5) == [])
        #expect(connected.setOnline(true) == [])

        var waiting = machine()
        _ = waiting.start()
        _ = waiting.closed(attempt: 1, now: .zero, random: 0.5)
        #expect(waiting.stop() == [.endSleep])
        #expect(waiting.sleepEnded(now: .seconds(60)) == [])

        var giving = machine(RetryPolicy(initial: .seconds(1), maximum: .seconds(1), maximumAttempts: 1))
        _ = giving.start()
        _ = giving.closed(attempt: 1, now: .zero, random: 0.5)
        _ = giving.sleepEnded(now: .seconds(1))
        #expect(giving.closed(attempt: 2, now: .seconds(1), random: 0.5) == [.failPending, .gaveUp(failures: 2)])
        #expect(giving.isStopped)
    }

    @Test("offline and back online before the socket has closed: not connected meanwhile, and it reconnects at once when it closes")
    func onlineWhileClosing() {
        var machine = machine()
        _ = machine.start()
        _ = machine.opened(attempt: 1)
        _ = machine.welcomed(attempt: 1)
        #expect(machine.setOnline(false) == [.close(attempt: 1), .failPending])
        #expect(machine.setOnline(true) == [])
        #expect(!machine.isConnected, "the closing socket takes no requests")
        #expect(machine.isConnecting, "requests wait for the next socket")
        #expect(machine.heartbeatDue(attempt: 1) == [], "no heartbeat on a closing socket")
        #expect(machine.closed(attempt: 1, now: .zero, random: 0.5) == [.failPending, .connect(attempt: 2)])
    }

    @Test("a renewal (sign-in or sign-out) replaces the socket at once, after failures too, and wakes a backoff; offline, it waits for the next attempt")
    func renew() {
        var machine = machine()
        #expect(machine.renew() == [])  // not running: the first attempt asks the provider anyway
        _ = machine.start()
        _ = machine.opened(attempt: 1)
        _ = machine.welcomed(attempt: 1)
        #expect(machine.renew() == [.close(attempt: 1)])
        #expect(machine.renew() == [])  // closing already: still renewed once
        #expect(machine.closed(attempt: 1, now: .seconds(1), random: 0.5) == [.failPending, .connect(attempt: 2)])
        // A hello refused on attempt 2 backs off; a renewal then wakes the sleep.
        _ = machine.opened(attempt: 2)
        #expect(machine.misbehaved(attempt: 2) == [.close(attempt: 2)])
        #expect(machine.closed(attempt: 2, now: .seconds(2), random: 0.5) == [.failPending, .sleep(until: .seconds(4), failures: 1)])
        #expect(machine.renew() == [.endSleep])
        #expect(machine.sleepEnded(now: .seconds(2)) == [.connect(attempt: 3)])
        // Renewing an attempt that never opened: replaced at once, not counted as a failure.
        #expect(machine.renew() == [.close(attempt: 3)])
        #expect(machine.closed(attempt: 3, now: .seconds(3), random: 0.5) == [.failPending, .connect(attempt: 4)])
        #expect(machine.failures == 0)
        // Offline: nothing to replace; going offline drops a renewal under way.
        _ = machine.setOnline(false)
        #expect(machine.renew() == [])
        #expect(machine.closed(attempt: 4, now: .seconds(4), random: 0.5) == [.failPending])
        #expect(machine.setOnline(true) == [.connect(attempt: 5)])
    }
}
