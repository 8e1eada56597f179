/// A clock as the time elapsed since the server started on it, so the pure state machines compare
/// plain durations and tests drive them with a manual clock.
struct ServerClock: Sendable {
    /// The time elapsed on the clock since this value was made.
    let now: @Sendable () -> Duration
    /// Sleeps for a duration of the clock.
    let sleep: @Sendable (Duration) async throws -> Void

    init(_ clock: any Clock<Duration>) {
        self = Self.make(clock)
    }

    private init(now: @escaping @Sendable () -> Duration, sleep: @escaping @Sendable (Duration) async throws -> Void) {
        self.now = now
        self.sleep = sleep
    }

    private static func make<C: Clock<Duration>>(_ clock: C) -> ServerClock {
        let start = clock.now
        return ServerClock(now: { start.duration(to: clock.now) }, sleep: { try await clock.sleep(for: $0) })
    }
}
