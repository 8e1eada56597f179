import Foundation
import Synchronization
import TandemCore

// How an engine follows its remote's connection and sign-in: the listener and the sender wait
// while either is down, and go on at once when both are back.
extension SyncCore {
    /// Follows the remote's connection, when it reports it: the listener and the sender wait for
    /// it while it is down, and go on at once when it is back, instead of each retrying on its own.
    /// When the remote has a sign-in, being signed out counts as down.
    func bindConnection(of remote: any ReachabilityReporting) {
        let connection = remote.observeConnection { [weak self] event in
            guard let self else { return }
            // Readers of the signal (pass-through listeners) hear it at once; the engine on its
            // executor, in the order told, before any failure of a stream that the drop caused
            // (which comes after the event, so is queued after it), which it then takes for the
            // connection's.
            self.connection.mark { $0.connected = event == .resumed }
            queue.enqueue { [weak self] in self?.reachabilityChanged { $0.connected = event == .resumed } }
        }
        let auth = remote.observeAuthState { [weak self] auth in
            // On the engine's executor, in the order told, since a switch reads the disk: the
            // connection's reader goes on at once. Another user's sign-in switches spaces first:
            // the listener and the sender then come up in that user's space (see `switchSpace(to:)`).
            self?.queue.enqueue { [weak self] in
                guard let self else { return }
                if case .signedIn(let uid) = auth { switchSpace(to: uid) }
                self.connection.mark { $0.signedIn = auth != .signedOut }
                reachabilityChanged { $0.signedIn = auth != .signedOut }
            }
        }
        queue.enqueue { [self] in
            let kept = state.access { state -> Bool in
                guard !state.tasks.isShutDown else { return false }
                state.tasks.connection = connection
                state.tasks.auth = auth
                state.tasks.wakeConnection = { remote.wakeConnection() }
                return true
            }
            if !kept {
                connection?.cancel()
                auth?.cancel()
            }
        }
    }

    /// The remote's connection or sign-in changed: when that takes the engine down or up, its
    /// listener and sender follow. On `queue`.
    private func reachabilityChanged(_ change: (inout Reachability) -> Void) {
        let event = state.access { state -> ConnectionEvent? in
            let before = state.tasks.reachability.isUp
            change(&state.tasks.reachability)
            let after = state.tasks.reachability.isUp
            state.sender.isHeld = !state.tasks.reachability.signedIn
            guard before != after else { return nil }
            return after ? .resumed : .disconnected
        }
        if let event { connectionChanged(event) }
    }

    /// The engine's remote went down (disconnected, or signed out) or came back. On `queue`.
    private func connectionChanged(_ event: ConnectionEvent) {
        switch event {
        case .disconnected:
            let (effects, retry) = state.access { state -> (ListenerEffects, Task<Void, Never>?) in
                let effects = Self.take(state.listener.disconnected(), in: &state)
                guard state.sender.disconnected() else { return (effects, nil) }
                defer { state.flushRetry = nil }
                return (effects, state.flushRetry)
            }
            retry?.cancel()
            log("connection_lost")
            perform(effects)
        case .resumed:
            log("connection_resumed")
            perform(state.access { Self.take($0.listener.resumed(), in: &$0) })
            resumeSender()
        }
    }

    /// Called by reads (a write does the same in its own step): a listener waiting to retry tries
    /// again now (signed out, it waits for the sign-in). Queued on `queue`; the caller goes on at
    /// once.
    func retryNowIfDown() {
        queue.enqueue { [self] in wakeListener() }
        triggerFlush(retryIfRunning: true)
    }

    /// A listener waiting out a backoff tries again now (signed out, it waits for the sign-in).
    /// In the current step on `queue`.
    func wakeListener() {
        perform(state.access { state in
            state.tasks.reachability.signedIn ? Self.take(state.listener.wake(), in: &state) : ListenerEffects()
        })
    }
}

/// What an engine follows of its remote: the connection, and the sign-in when the remote has one.
/// Up (until an event says otherwise) when both are.
struct Reachability: Sendable {
    var connected = true
    var signedIn = true
    var isUp: Bool { connected && signedIn }
}

/// The remote's connection and sign-in as their events said, for pass-through listeners, which
/// read it from their own tasks: whether both are up, how many times they came back, and who waits
/// for that. A connection event is marked here as it is told, before the failure of any stream it
/// caused; the engine's own copy (``Reachability``) changes on its executor.
final class ConnectionSignal: Sendable {
    private struct Status: Sendable {
        var reachability = Reachability()
        var resumes = 0
    }

    private let watched = WatchedValue(Status())

    /// Whether the connection is up (and signed in, when the remote has a sign-in), and how many
    /// times it came back so far, read together.
    var status: (isConnected: Bool, resumes: Int) {
        let status = watched.value
        return (status.reachability.isUp, status.resumes)
    }

    func mark(_ change: @Sendable (inout Reachability) -> Void) {
        watched.update { status in
            let before = status.reachability.isUp
            change(&status.reachability)
            if !before && status.reachability.isUp { status.resumes += 1 }
        }
    }

    /// Returns once the connection came back more than `resumes` times in all, or when the task is
    /// cancelled.
    func waitForResume(after resumes: Int) async {
        await watched.wait { $0.resumes > resumes }
    }
}
