/// A token bucket: `rate` tokens a second (writes, or messages), holding at most one second's worth.
/// Pure: the caller passes the time, as a point on its clock.
struct RateLimiter: Sendable {
    let rate: Double
    /// The bucket's size in whole writes: the rate, kept as an `Int` (`Int(rate)` traps for a rate
    /// near `Int.max`, which a limit meant as "unlimited" is).
    private let capacity: Int
    private var tokens: Double
    private var last: Duration?

    init(perSecond: Int) {
        capacity = max(1, perSecond)
        rate = Double(capacity)
        tokens = rate
    }

    /// Takes `count` tokens if there are enough at `now`; false (taking none) otherwise. A request
    /// larger than the bucket takes it whole once full, or it could never be admitted.
    mutating func admit(_ count: Int, at now: Duration) -> Bool {
        let count = min(count, capacity)
        if let last {
            tokens = min(rate, tokens + max(0, (now - last).doubleSeconds) * rate)
        }
        last = now
        guard Double(count) <= tokens else { return false }
        tokens -= Double(count)
        return true
    }

    /// How long until `count` tokens are there, from the last admission.
    func wait(for count: Int) -> Duration {
        let missing = max(0, Double(min(count, capacity)) - tokens)
        return .milliseconds(Int((missing / rate * 1000).rounded(.up)))
    }
}
