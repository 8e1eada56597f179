import Logging
import ServiceLifecycle
import Synchronization

/// Keeps the deadlines of the server's WebSocket sessions on the server's clock, with one timer for
/// the whole server:
/// - a session silent for three heartbeat intervals is closed, at that very point (its last
///   message plus ``allowedSilence``);
/// - a session whose token expires is told so at its `exp`, whether or not it says anything
///   (``expire(_:at:then:)``): its listeners stop there and then.
///
/// The timer sleeps until the earliest deadline of all sessions. One shared timer instead of one
/// per session: a sleep cancelled when its session ends would hold its memory until the deadline
/// it was cancelled before.
final class SessionWatchdog: Service, Sendable {
    /// A session being watched: when it was last heard, how to end it, and its token's expiry.
    private final class Watched: Sendable {
        let lastHeard: LastHeard
        let close: @Sendable () -> Void
        init(lastHeard: LastHeard, close: @escaping @Sendable () -> Void) {
            self.lastHeard = lastHeard
            self.close = close
        }
    }

    private struct Expiry {
        var at: Duration
        var expire: @Sendable () -> Void
    }

    private struct State {
        var sessions: [Int: Watched] = [:]
        var expiries: [Int: Expiry] = [:]
        /// The point the timer sleeps until, while it sleeps.
        var sleepsUntil: Duration?
        var sleeper: CheckedContinuation<Void, Never>?
        /// A wake that came while the timer was not asleep: it looks again at once.
        var woken = false
    }

    let interval: Duration
    let clock: ServerClock
    let logger: Logger
    private let state = Mutex(State())

    init(interval: Duration, clock: ServerClock, logger: Logger) {
        self.interval = interval
        self.clock = clock
        self.logger = logger
    }

    /// How long a session may stay silent.
    var allowedSilence: Duration { interval * 3 }

    func watch(_ session: Int, lastHeard: LastHeard, close: @escaping @Sendable () -> Void) {
        // A new session's silence deadline is at least a full allowance away, never before the
        // timer's: no wake needed.
        state.withLock { $0.sessions[session] = Watched(lastHeard: lastHeard, close: close) }
    }

    /// Calls `expire` once the clock reaches `deadline`, unless the session is forgotten first.
    func expire(_ session: Int, at deadline: Duration, then expire: @escaping @Sendable () -> Void) {
        let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.sessions[session] != nil else { return nil }
            state.expiries[session] = Expiry(at: deadline, expire: expire)
            guard state.sleepsUntil.map({ deadline < $0 }) ?? true else { return nil }
            return Self.wake(&state)
        }
        sleeper?.resume()
    }

    func forget(_ session: Int) {
        state.withLock { state in
            state.sessions.removeValue(forKey: session)
            state.expiries.removeValue(forKey: session)
        }
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let now = self.clock.now()
                let (silent, expired, next) = self.due(at: now)
                for (session, watched) in silent {
                    self.logger.debug("stream session \(session): no message for \(self.allowedSilence); closing")
                    watched.close()
                }
                for expire in expired { expire() }
                await self.sleep(until: next)
            }
        }
    }

    /// Takes out the sessions whose deadline passed at `now`, and finds the next deadline.
    private func due(at now: Duration) -> (silent: [(Int, Watched)], expired: [@Sendable () -> Void], next: Duration) {
        let allowed = allowedSilence
        return state.withLock { state in
            var next = now + allowed
            var silent: [(Int, Watched)] = []
            var expired: [@Sendable () -> Void] = []
            for (session, watched) in state.sessions {
                let deadline = watched.lastHeard.instant + allowed
                if deadline <= now {
                    silent.append((session, watched))
                } else {
                    next = min(next, deadline)
                }
            }
            for (session, _) in silent {
                state.sessions.removeValue(forKey: session)
                state.expiries.removeValue(forKey: session)
            }
            for (session, expiry) in state.expiries {
                if expiry.at <= now {
                    expired.append(expiry.expire)
                    state.expiries.removeValue(forKey: session)
                } else {
                    next = min(next, expiry.at)
                }
            }
            state.sleepsUntil = next
            return (silent, expired, next)
        }
    }

    /// Sleeps until `deadline`, or until an earlier deadline is set (``expire(_:at:then:)``).
    private func sleep(until deadline: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await self.clock.sleepUntil(deadline) }
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let goOn = self.state.withLock { state -> Bool in
                            if state.woken || Task.isCancelled {
                                state.woken = false
                                return true
                            }
                            state.sleeper = continuation
                            return false
                        }
                        if goOn { continuation.resume() }
                    }
                } onCancel: {
                    self.state.withLock { $0.sleeper.take() }?.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
        state.withLock { state in
            state.sleepsUntil = nil
            state.woken = false
        }
    }

    /// The sleeper to resume (outside the lock), or a wake kept for the next sleep.
    private static func wake(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        if let sleeper = state.sleeper.take() { return sleeper }
        state.woken = true
        return nil
    }
}
