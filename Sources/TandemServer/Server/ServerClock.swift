/// A clock as the time elapsed since the server started on it, so the pure state machines compare
/// plain durations and tests drive them with a manual clock.
struct ServerClock: Sendable {
    /// The time elapsed on the clock since this value was made.
    let now: @Sendable () -> Duration
    /// Sleeps until a point on the clock (a time elapsed since this value was made). The deadline
    /// is absolute, so a sleep that starts late still ends on time.
    let sleepUntil: @Sendable (Duration) async throws -> Void
    /// Whether this is the real, continuous clock, whose deadlines NIO's event-loop timers can
    /// keep. A cancelled `Task.sleep` holds memory until its deadline passes; a cancelled
    /// event-loop timer frees it at once, which matters for a timer per connection.
    let isContinuous: Bool

    init(_ clock: any Clock<Duration>) {
        self = Self.make(clock)
    }

    private init(now: @escaping @Sendable () -> Duration, sleepUntil: @escaping @Sendable (Duration) async throws -> Void, isContinuous: Bool) {
        self.now = now
        self.sleepUntil = sleepUntil
        self.isContinuous = isContinuous
    }

    /// Sleeps for a duration from now.
    func sleep(_ duration: Duration) async throws {
        try await sleepUntil(now() + duration)
    }

    private static func make<C: Clock<Duration>>(_ clock: C) -> ServerClock {
        let start = clock.now
        return ServerClock(now: { start.duration(to: clock.now) }, sleepUntil: { try await clock.sleep(until: start.advanced(by: $0), tolerance: nil) },
                           isContinuous: clock is ContinuousClock)
    }
}

extension Duration {
    /// The whole nanoseconds of a duration.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
