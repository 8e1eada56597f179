import Foundation
import Synchronization
import TandemCore

// How an engine follows its remote's connection and sign-in: the listener and the sender wait
// while either is down, and go on at once when both are back.
extension SyncCore {
    /// What an engine follows of its remote: the connection, and the sign-in when the remote has
    /// one. Up (until an event says otherwise) when both are.
    struct Reachability {
        var connected = true
        var signedIn = true
        var isUp: Bool { connected && signedIn }
    }

    /// Follows the remote's connection, when it reports it: the listener and the sender wait for
    /// it while it is down, and go on at once when it is back, instead of each retrying on its own.
    /// When the remote has a sign-in, being signed out counts as down.
    func bindConnection(of remote: any ReachabilityReporting) {
        let connection = remote.observeConnection { [weak self] event in
            self?.reachabilityChanged { $0.connected = event == .resumed }
        }
        let auth = remote.observeAuthState { [weak self] auth in
            // On the engine's executor, in the order told, since a switch reads the disk: the
            // connection's reader goes on at once. Another user's sign-in switches spaces first:
            // the listener and the sender then come up in that user's space (see `switchSpace(to:)`).
            self?.queue.enqueue { [weak self] in
                if case .signedIn(let uid) = auth { self?.switchSpace(to: uid) }
                self?.reachabilityChanged { $0.signedIn = auth != .signedOut }
            }
        }
        let kept = state.withLock { state -> Bool in
            guard !state.tasks.isShutDown else { return false }
            state.tasks.connection = connection
            state.tasks.auth = auth
            return true
        }
        if !kept {
            connection?.cancel()
            auth?.cancel()
        }
    }

    /// The remote's connection or sign-in changed: when that takes the engine down or up, its
    /// listener and sender follow.
    private func reachabilityChanged(_ change: (inout Reachability) -> Void) {
        let event = state.withLock { state -> ConnectionEvent? in
            let before = state.tasks.reachability.isUp
            change(&state.tasks.reachability)
            let after = state.tasks.reachability.isUp
            state.sender.isHeld = !state.tasks.reachability.signedIn
            guard before != after else { return nil }
            return after ? .resumed : .disconnected
        }
        if let event { connectionChanged(event) }
    }

    /// The engine's remote went down (disconnected, or signed out) or came back.
    private func connectionChanged(_ event: ConnectionEvent) {
        connection.mark(event)
        switch event {
        case .disconnected:
            // The listener hears it at once (before its stream's failure, which it then takes for
            // the connection's); the sender on the engine's executor, in order with `resumed`,
            // which is queued there too: told out of order, it would take a connection that is
            // down for up, and back off.
            let effects = state.withLock { Self.take($0.listener.disconnected(), in: &$0) }
            queue.enqueue { [self] in
                let retry = state.withLock { state -> Task<Void, Never>? in
                    guard state.sender.disconnected() else { return nil }
                    defer { state.flushRetry = nil }
                    return state.flushRetry
                }
                retry?.cancel()
            }
            log("connection_lost")
            perform(effects)
        case .resumed:
            log("connection_resumed")
            perform(state.withLock { Self.take($0.listener.resumed(), in: &$0) })
            resumeSender()
        }
    }

    /// Called by reads and writes: a listener waiting to retry tries again now (signed out, it
    /// waits for the sign-in).
    func retryNowIfDown() {
        perform(state.withLock { state in
            state.tasks.reachability.signedIn ? Self.take(state.listener.wake(), in: &state) : ListenerEffects()
        })
        triggerFlush(retryIfRunning: true)
    }
}

/// The remote's connection as its events said: whether it is up, how many times it came back, and
/// who waits for it to come back.
final class ConnectionSignal: Sendable {
    private struct Status: Sendable {
        var isConnected = true
        var resumes = 0
    }

    private let watched = WatchedValue(Status())

    /// Whether the connection is up, and how many times it came back so far, read together.
    var status: (isConnected: Bool, resumes: Int) {
        let status = watched.value
        return (status.isConnected, status.resumes)
    }

    func mark(_ event: ConnectionEvent) {
        watched.update { status in
            status.isConnected = event == .resumed
            if event == .resumed { status.resumes += 1 }
        }
    }

    /// Returns once the connection came back more than `resumes` times in all, or when the task is
    /// cancelled.
    func waitForResume(after resumes: Int) async {
        await watched.wait { $0.resumes > resumes }
    }
}
