import Testing
import TandemTesting

@Suite("ManualClock")
struct ManualClockTests {
    @Test("a sleeper wakes when time reaches its deadline, not before")
    func wakesAtDeadline() async throws {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(2)) }
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(1))
        #expect(clock.sleeperCount == 1)
        #expect(clock.pendingDeadlines == [ManualClock.Instant(offset: .seconds(2))])
        clock.advance(by: .seconds(1))
        try await sleeper.value
        #expect(clock.sleeperCount == 0)
        #expect(clock.now.offset == .seconds(2))
    }

    @Test("a deadline already passed returns at once")
    func pastDeadline() async throws {
        let clock = ManualClock()
        clock.advance(by: .seconds(5))
        try await clock.sleep(until: ManualClock.Instant(offset: .seconds(3)))
    }

    @Test("cancelling a sleeper throws CancellationError")
    func cancellation() async throws {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(60)) }
        await clock.waitForSleepers(count: 1)
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test("advancing wakes every sleeper whose deadline is reached and leaves the later ones")
    func severalSleepers() async throws {
        let clock = ManualClock()
        let (woke, continuation) = AsyncStream<Int>.makeStream()
        for seconds in [3, 1, 2, 20] {
            Task {
                try await clock.sleep(for: .seconds(seconds))
                continuation.yield(seconds)
            }
        }
        await clock.waitForSleepers(count: 4)
        clock.advance(by: .seconds(10))
        var seen: [Int] = []
        for await value in woke {
            seen.append(value)
            if seen.count == 3 { break }
        }
        #expect(Set(seen) == [1, 2, 3])
        #expect(clock.pendingDeadlines == [ManualClock.Instant(offset: .seconds(20))])
    }
}
