import Foundation

/// How long to wait before each retry of a failed listener or connection.
///
/// The default doubles from 2 seconds to a 60-second cap: 2, 4, 8, 16, 32, 60, 60… A first good
/// result resets the count. Jitter spreads many clients' retries apart.
///
/// ```swift
/// let policy = RetryPolicy.exponential(initial: .seconds(1), maximum: .seconds(30), jitter: 0.2)
/// policy.delay(afterFailures: 1)  // 1 s, give or take 20 %
/// ```
public struct RetryPolicy: Sendable, Hashable {
    /// The delay after the first failure.
    public var initial: Duration
    /// Each further failure multiplies the delay by this.
    public var multiplier: Double
    /// The longest delay.
    public var maximum: Duration
    /// A fraction (0...1) of each delay that is randomized, up or down.
    public var jitter: Double
    /// The most retries in a row: the failure after that many retries ends them (with 3, the
    /// fourth failure in a row gives up); nil retries for ever.
    public var maximumAttempts: Int?

    /// A policy waiting `initial` after the first failure, multiplying the delay by `multiplier`
    /// after each further one up to `maximum`. `jitter` is clamped to 0...1; a nil
    /// `maximumAttempts` retries for ever.
    public init(initial: Duration, multiplier: Double = 2, maximum: Duration, jitter: Double = 0, maximumAttempts: Int? = nil) {
        self.initial = initial
        self.multiplier = multiplier
        self.maximum = maximum
        self.jitter = min(max(jitter, 0), 1)
        self.maximumAttempts = maximumAttempts
    }

    /// Exponential backoff; the default is 2, 4, 8, 16, 32, 60, 60… seconds.
    public static func exponential(
        initial: Duration = .seconds(2), multiplier: Double = 2, maximum: Duration = .seconds(60), jitter: Double = 0
    ) -> RetryPolicy {
        RetryPolicy(initial: initial, multiplier: multiplier, maximum: maximum, jitter: jitter)
    }

    /// 2, 4, 8, 16, 32, 60, 60… seconds, without jitter.
    public static var `default`: RetryPolicy { .exponential() }

    /// Never retry.
    public static var none: RetryPolicy { RetryPolicy(initial: .zero, maximum: .zero, maximumAttempts: 0) }

    /// The delay before retrying after `failures` failures in a row (1 for the first), or nil when the
    /// policy gives up. `random` is a number in 0..<1 that places the jitter.
    public func delay(afterFailures failures: Int, random: Double = 0.5) -> Duration? {
        guard failures >= 1 else { return .zero }
        if let maximumAttempts, failures > maximumAttempts { return nil }
        let base = initial.doubleSeconds * pow(multiplier, Double(failures - 1))
        let capped = min(base, maximum.doubleSeconds)
        let spread = capped * jitter * (random * 2 - 1)
        return Duration.seconds(max(0, capped + spread))
    }

    /// The delay with jitter drawn from a random number generator.
    public func delay(afterFailures failures: Int, using generator: inout some RandomNumberGenerator) -> Duration? {
        delay(afterFailures: failures, random: jitter == 0 ? 0.5 : Double.random(in: 0..<1, using: &generator))
    }
}
