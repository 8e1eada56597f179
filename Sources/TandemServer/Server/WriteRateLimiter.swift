/// A token bucket over one connection's writes: `rate` tokens a second, holding at most one second's
/// worth. Pure: the caller passes the time.
struct WriteRateLimiter: Sendable {
    let rate: Double
    private var tokens: Double
    private var last: ContinuousClock.Instant?

    init(writesPerSecond: Int) {
        rate = Double(max(1, writesPerSecond))
        tokens = rate
    }

    /// Takes `count` tokens if there are enough at `now`; false (taking none) otherwise.
    mutating func admit(_ count: Int, at now: ContinuousClock.Instant) -> Bool {
        if let last {
            let (seconds, attoseconds) = (now - last).components
            tokens = min(rate, tokens + (Double(seconds) + Double(attoseconds) / 1e18) * rate)
        }
        last = now
        guard Double(count) <= tokens else { return false }
        tokens -= Double(count)
        return true
    }
}
