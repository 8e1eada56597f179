import Synchronization

/// The random numbers an engine's or a client's retries draw their jitter from: one generator,
/// shared by every retry of its owner under a lock. Give a seeded one to replay a test's delays.
final class RetryRandomness: Sendable {
    private let generator: Mutex<any RandomNumberGenerator & Sendable>

    init(_ generator: any RandomNumberGenerator & Sendable) {
        self.generator = Mutex(generator)
    }

    /// A number in 0..<1 from the generator.
    func next() -> Double {
        generator.withLock { generator in Double.random(in: 0..<1, using: &generator) }
    }

    /// `policy`'s delay after `failures` failures, its jitter drawn from the generator.
    func delay(_ policy: RetryPolicy, afterFailures failures: Int) -> Duration? {
        generator.withLock { generator in policy.delay(afterFailures: failures, using: &generator) }
    }
}
