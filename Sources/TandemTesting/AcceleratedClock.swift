/// A clock that runs `factor` times faster than the wall: a retry that would wait a second waits a
/// millisecond at the default factor. For simulations and soak tests that want the engines' real
/// backoffs, in their real order, without the wait; a test that must decide when time moves takes
/// a `ManualClock` instead.
///
/// ```swift
/// let clock = AcceleratedClock(factor: 1_000)
/// try await clock.sleep(for: .seconds(2))   // about 2 ms
/// ```
public struct AcceleratedClock: Clock, Sendable {
    /// A point on the accelerated clock: the accelerated time since the clock was made.
    public struct Instant: InstantProtocol, Sendable, Hashable, Comparable {
        /// The accelerated time since the clock's start.
        public var offset: Duration

        /// The instant `duration` later (earlier, for a negative duration).
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`; negative when `other` is earlier.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let start: ContinuousClock.Instant
    /// How many times faster than the wall the clock runs.
    public let factor: Int

    /// A clock starting now, running `factor` times faster than the wall (at least once as fast).
    public init(factor: Int = 1_000) {
        start = ContinuousClock.now
        self.factor = max(1, factor)
    }

    /// The accelerated time since the clock was made.
    public var now: Instant { Instant(offset: (ContinuousClock.now - start) * factor) }
    /// The wall clock's resolution, accelerated.
    public var minimumResolution: Duration { ContinuousClock().minimumResolution * factor }

    /// Sleeps on the wall clock for the time to `deadline` divided by the factor.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let wall = start.advanced(by: deadline.offset / factor)
        try await ContinuousClock().sleep(until: wall, tolerance: nil)
    }
}
