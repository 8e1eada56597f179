import TandemCore

// When the store says it missed commits (a node of a shared database cut off for longer than the
// commit log kept them), every listener loads again from where it was.
extension FanOutHub {
    /// Has every live listener load again from the version it had reached (its changes since, or a
    /// snapshot that replaces its view where it takes one), as after a reconnection: the store
    /// missed commits (``CommitNotice/incomplete``), so what the listeners were sent may lack
    /// them. Commits meanwhile wait in each listener's buffer, as for a first load.
    func reloadAll() {
        let reloads = state.withLock { state -> [(ListenerKey, Int, Version)] in
            var reloads: [(ListenerKey, Int, Version)] = []
            for key in state.table.keys {
                state.table.update(key) { listener in
                    guard case .live(let version) = listener.phase else {
                        state.staleLoads[key] = listener.registration
                        return
                    }
                    listener.phase = .loading([])
                    reloads.append((key, listener.registration, version))
                }
            }
            return reloads
        }
        logger.warning("the store missed commits; \(reloads.count) listener(s) load again")
        for (key, registration, version) in reloads { requeryQueue.yield((key, registration, reloadFrom: version)) }
    }

    /// Loads a listener again from `version` (``reloadAll()``), unless it was stopped meanwhile.
    func reload(_ key: ListenerKey, registration: Int, from version: Version) async {
        guard let target = state.withLock({ state in state.table[key].flatMap { $0.registration == registration ? $0.target : nil } }) else { return }
        await load(key, target: target, resumeFrom: version)
    }
}
