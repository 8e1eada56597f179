import Testing
@testable import Tandem

@Suite("RetryPolicy")
struct RetryPolicyTests {
    @Test("the default grows 2, 4, 8, 16, 32 then stays at 60 seconds")
    func defaultDelays() {
        let delays = (1...8).map { RetryPolicy.default.delay(afterFailures: $0) }
        #expect(delays == [2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
    }

    @Test("jitter stays within its fraction of the delay")
    func jitter() {
        let policy = RetryPolicy.exponential(jitter: 0.25)
        #expect(policy.delay(afterFailures: 3, random: 0) == .seconds(6))
        #expect(policy.delay(afterFailures: 3, random: 0.5) == .seconds(8))
        #expect(policy.delay(afterFailures: 3, random: 1) == .seconds(10))
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let delay = policy.delay(afterFailures: 2, using: &generator)!
            #expect(delay >= .seconds(3) && delay <= .seconds(5))
        }
    }

    @Test("none gives up at once; a maximum of attempts gives up after it")
    func givingUp() {
        #expect(RetryPolicy.none.delay(afterFailures: 1) == nil)
        let three = RetryPolicy(initial: .seconds(1), maximum: .seconds(10), maximumAttempts: 3)
        #expect(three.delay(afterFailures: 3) == .seconds(4))
        #expect(three.delay(afterFailures: 4) == nil)
    }
}
