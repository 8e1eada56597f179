import Synchronization
import TandemCore

/// What each signed-in user may use of the server at once, over all their connections and HTTP
/// requests: open WebSocket connections (``ServerLimits/maximumConnectionsPerUser``) and writes a
/// second (``ServerLimits/maximumWritesPerSecondPerUser``). Anonymous callers have no user to count
/// against; their connections are bounded by the per-connection limits alone.
final class UserQuotas: Sendable {
    private struct State {
        var connections: [String: Int] = [:]
        var writes: [String: RateLimiter] = [:]
    }

    private let limits: ServerLimits
    private let now: @Sendable () -> Duration
    private let state = Mutex(State())
    /// The most users whose write buckets are kept; past it they all start full again (at most a
    /// second's worth more for each), so the table never grows without bound.
    static let maximumTrackedUsers = 65_536

    init(limits: ServerLimits, now: @escaping @Sendable () -> Duration) {
        self.limits = limits
        self.now = now
    }

    /// Counts a connection of `uid`; refused with `resource-exhausted` when the user has the most
    /// allowed open already. Each success is matched by one ``close(for:)``.
    func open(for uid: String) throws(TandemError) {
        let limit = limits.maximumConnectionsPerUser
        let admitted = state.withLock { state -> Bool in
            let open = state.connections[uid, default: 0]
            guard open < limit else { return false }
            state.connections[uid] = open + 1
            return true
        }
        if !admitted {
            throw TandemError(.resourceExhausted, "The user \(uid) has \(limit) connections open, the most allowed; close one before opening another.")
        }
    }

    func close(for uid: String) {
        state.withLock { state in
            let open = state.connections[uid, default: 0] - 1
            state.connections[uid] = open > 0 ? open : nil
        }
    }

    /// Takes `count` writes from the user's bucket; the refusal (with `retryAfter`) when there are
    /// not enough.
    func admitWrites(_ count: Int, for uid: String) -> TandemError? {
        let now = now()
        let limit = limits.maximumWritesPerSecondPerUser
        let wait = state.withLock { state -> Duration? in
            if state.writes[uid] == nil, state.writes.count >= Self.maximumTrackedUsers { state.writes.removeAll() }
            var bucket = state.writes[uid] ?? RateLimiter(perSecond: limit)
            defer { state.writes[uid] = bucket }
            return bucket.admit(count, at: now) ? nil : bucket.wait(for: count)
        }
        guard let wait else { return nil }
        return TandemError(.resourceExhausted, "The user \(uid) sent more than \(limit) writes a second; nothing was written. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again.",
                           retryAfter: wait)
    }
}
