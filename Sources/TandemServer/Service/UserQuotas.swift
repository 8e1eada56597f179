import Synchronization
import TandemCore

/// What each signed-in user may use of the server at once, over all their connections and HTTP
/// requests: open WebSocket connections (``ServerLimits/maximumConnectionsPerUser``) and writes a
/// second (``ServerLimits/maximumWritesPerSecondPerUser``). An anonymous HTTP caller's writes
/// count against its address, at the same rate; an anonymous WebSocket connection is bounded by
/// its own per-connection limits.
final class UserQuotas: Sendable {
    /// Who writes are counted against.
    enum Caller: Hashable, Sendable, CustomStringConvertible {
        case user(String)
        case address(String)

        var description: String {
            switch self {
            case .user(let uid): "The user \(uid)"
            case .address(let address): "The address \(address)"
            }
        }
    }

    private struct State {
        var connections: [String: Int] = [:]
        var writes: [Caller: RateLimiter] = [:]
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

    /// Takes `count` writes from a signed-in user's bucket; the refusal (with `retryAfter`) when
    /// there are not enough.
    func admitWrites(_ count: Int, for uid: String) -> TandemError? {
        admitWrites(count, for: .user(uid))
    }

    /// Takes `count` writes from the caller's bucket; the refusal (with `retryAfter`) when there
    /// are not enough.
    func admitWrites(_ count: Int, for caller: Caller) -> TandemError? {
        let now = now()
        let limit = limits.maximumWritesPerSecondPerUser
        let wait = state.withLock { state -> Duration? in
            if state.writes[caller] == nil, state.writes.count >= Self.maximumTrackedUsers { state.writes.removeAll() }
            var bucket = state.writes[caller] ?? RateLimiter(perSecond: limit)
            defer { state.writes[caller] = bucket }
            return bucket.admit(count, at: now) ? nil : bucket.wait(for: count)
        }
        guard let wait else { return nil }
        return TandemError(.resourceExhausted, "\(caller) sent more than \(limit) writes a second; nothing was written. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again.",
                           retryAfter: wait)
    }
}
