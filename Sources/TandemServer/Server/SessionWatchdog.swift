import Logging
import ServiceLifecycle
import Synchronization

/// Closes WebSocket sessions that went silent: one timer for the whole server, ticking every
/// heartbeat interval on the server's clock, closes each session that has sent nothing for three
/// intervals (so between three and four intervals after its last message).
///
/// One shared timer instead of one per session: a sleep cancelled when its session ends would
/// hold its memory until the deadline it was cancelled before.
final class SessionWatchdog: Service, Sendable {
    /// A session being watched: when it was last heard, and how to end it.
    private final class Watched: Sendable {
        let lastHeard: LastHeard
        let close: @Sendable () -> Void
        init(lastHeard: LastHeard, close: @escaping @Sendable () -> Void) {
            self.lastHeard = lastHeard
            self.close = close
        }
    }

    let interval: Duration
    let clock: ServerClock
    let logger: Logger
    private let sessions = Mutex<[Int: Watched]>([:])

    init(interval: Duration, clock: ServerClock, logger: Logger) {
        self.interval = interval
        self.clock = clock
        self.logger = logger
    }

    /// How long a session may stay silent.
    var allowedSilence: Duration { interval * 3 }

    func watch(_ session: Int, lastHeard: LastHeard, close: @escaping @Sendable () -> Void) {
        sessions.withLock { $0[session] = Watched(lastHeard: lastHeard, close: close) }
    }

    func forget(_ session: Int) {
        _ = sessions.withLock { $0.removeValue(forKey: session) }
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var tick = self.clock.now()
            while !Task.isCancelled {
                tick += self.interval
                do {
                    try await self.clock.sleepUntil(tick)
                } catch {
                    return
                }
                let now = self.clock.now()
                let allowed = self.allowedSilence
                let silent = self.sessions.withLock { sessions in
                    sessions.filter { now - $0.value.lastHeard.instant >= allowed }
                }
                for (session, watched) in silent {
                    self.logger.debug("stream session \(session): no message for \(allowed); closing")
                    self.forget(session)
                    watched.close()
                }
            }
        }
    }
}
