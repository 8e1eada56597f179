import Foundation
import TandemCore

/// An engine keeps one space per principal on the device: one per signed-in user, and one for
/// signed out. A space is the cached documents, the outbox (with its own writer id), and the point
/// the listener resumes from. What the engine shows, sends and listens to is always one space's.
///
/// - When the remote says another user signed in, the engine switches to that user's space: it
///   shows that user's cache (loaded from disk, or empty), listens from that space's own resume
///   point (so the user's older documents load), and sends that space's writes under its writer id.
/// - The space it leaves is kept as it was: its pending writes stay its user's, sent when that user
///   signs in again on this engine (or on the next engine with the same manager key), never as
///   anyone else. Whoever awaited them hears `queued`.
/// - Signing out does not switch: the engine goes down (listener detached, writes held) and keeps
///   showing the space it had until someone signs in.
/// - The persistence remembers whose space was shown last, so a relaunch shows it again before the
///   server has confirmed who is signed in.
extension SyncCore {
    /// The user whose space the engine shows (nil: the signed-out space).
    package var spaceUser: String? { state.current.user }

    /// How many times the engine switched spaces: the epoch of what it shows now.
    var spaceEpoch: Int { state.current.space }

    /// Shows `user`'s space (nil: the signed-out one), if it shows another now. Runs on `queue`
    /// (the auth handler queues it), since it reads the new space from disk.
    func switchSpace(to user: String?) {
        let switched = { () -> (effects: ListenerEffects, waiters: [WriteWaiter], retry: Task<Void, Never>?, from: String?, failure: (any Error)?)? in
            guard state.access({ $0.user != user && !$0.tasks.isShutDown }) else { return nil }
            // The new space is read here, on `queue`: no change of the old space's view can
            // come between, and none of the new one's before it is shown.
            var persistence = basePersistence
            var loaded: SpaceState
            var failure: (any Error)?
            do {
                persistence = try basePersistence.space(for: user)
                loaded = try persistence.loadSpace { Self.newClientID(managerKey) }
            } catch {
                failure = error
                // Shown empty; the writes queued in it are left as they are, and none is added.
                persistence = .unreadable(because: error)
                loaded = SpaceState(outbox: Outbox(clientID: Self.newClientID(managerKey)))
            }
            let now = Date()
            let result = state.access { state -> (ListenerEffects, [WriteWaiter], Task<Void, Never>?, String?) in
                let from = state.user
                if case .memory = state.persistence {
                    // Nothing on disk: the space left is kept in memory, to come back to.
                    state.memorySpaces[from] = SpaceState(documents: Array(state.view.base.values), outbox: state.view.outbox,
                                                          resumeVersion: state.listener.resumeVersion, resumeQuery: state.queryDigest, documentID: state.documentID)
                    if let kept = state.memorySpaces.removeValue(forKey: user) { loaded = kept }
                }
                state.user = user
                state.persistence = persistence
                state.space += 1
                // A document engine goes on following the document the app chose.
                let documents = state.documentID.map { id in loaded.documents.filter { PathRules.sameBytes($0.path.id, id) } } ?? loaded.documents
                var outbox = loaded.outbox
                outbox.markAllAttempted()
                state.view = LocalView(base: documents, outbox: outbox, now: now)
                let waiters = state.sender.releaseAllWaiters()
                var sender = Sender(limits: state.sender.limits, policy: retryPolicy)
                sender.isHeld = state.sender.isHeld
                if state.sender.isOffline { _ = sender.disconnected() }
                state.sender = sender
                rejected.withLock { $0 = [] }
                state.resumeQuery = loaded.resumeQuery
                state.isFromCache = true
                _ = Self.rebuildModels(&state, orderHint: documents)
                Self.refreshQueryView(nil, in: &state)
                // The space's resume point is for the query it was reached by.
                let resume = state.query == nil || loaded.resumeQuery == state.queryDigest ? loaded.resumeVersion : nil
                let effects = Self.take(state.listener.switchedSpace(resumeVersion: resume), in: &state)
                defer { state.flushRetry = nil }
                return (effects, waiters, state.flushRetry, from)
            }
            do {
                try basePersistence.setLastUser(user)
            } catch {
                logPersistFailure(error)
            }
            return (result.0, result.1, result.2, result.3, failure)
        }()
        guard let switched else { return }
        switched.retry?.cancel()
        if let failure = switched.failure {
            log("persistence_fail", ["error_description": "\(failure)"], severity: .severe)
        }
        log("space_switched", ["from_user": switched.from ?? "", "to_user": user ?? ""])
        for waiter in switched.waiters { waiter.resume(returning: .queued) }
        perform(switched.effects)
        notifyChanged([.documents, .pendingWrites, .rejectedWrites, .isFromCache])
        triggerFlush()
    }
}
