import Foundation
import Tandem
import TandemCore

extension SimulationWorld {
    /// Brings the device online as `user`, waits for both engines to settle, and checks every
    /// promise for that user's data. Returns what broke, if anything.
    func quiet(as user: String) async -> String? {
        log("quiet as \(user)")
        server.goOnline()
        server.setLatency(.zero)
        intended = user
        guard let engine, let changes else { return "No engines." }
        let server = self.server
        let client = server.client
        guard await within({
            do { try await server.signIn(as: user) } catch { return false }
            return true
        }) else {
            return "Hang: the client did not sign in as \(user) (it is \(client.authState))."
        }
        log("\(user)'s change queue: \(changes.storedChanges(account: user))")
        listening = true
        Task { await engine.startListening() }
        changes.start()
        let expected = increments[user, default: [:]]
        // Settled: checked, then checked again once every step queued meanwhile has run (a sign-in
        // heard late could have moved an engine to another user's data in between).
        var settled = false
        while !settled {
            let reached = await within {
                await engine.waitUntil {
                    engine.core.spaceUser == user && !engine.hasPendingWrites && !engine.isFromCache
                        && Self.shownMatches(engine.currentCollection, server: server, user: user)
                }
            }
            guard reached else {
                if !engine.rejectedWrites.isEmpty { break }
                return "Hang: \(user)'s engine did not settle (it shows \(engine.core.spaceUser ?? "nobody")'s data; pending \(engine.pendingWrites.count), from cache \(engine.isFromCache)); it shows \(engine.currentCollection), the server has \(Self.serverCounters(server, user))."
            }
            await engine.core.barrier()
            settled = engine.core.spaceUser == user && !engine.hasPendingWrites && Self.shownMatches(engine.currentCollection, server: server, user: user)
        }
        if !engine.rejectedWrites.isEmpty {
            return "Lost: the server refused \(engine.rejectedWrites.count) write(s) of \(user)'s: \(engine.rejectedWrites.map { "\($0.error)" })."
        }
        for counter in Self.counters {
            let onServer = Self.serverCounters(server, user)[counter] ?? -1
            let queued = expected[counter] ?? 0
            let either = unattributed[counter] ?? 0
            if onServer < queued || onServer > queued + either {
                return "\(onServer < queued ? "Lost" : "Applied twice"): \(user)'s \(counter) is \(onServer) on the server, and the app queued \(queued) increment(s)\(either > 0 ? " (and \(either) while the user switched)" : "")."
            }
        }
        let changesSettled = await within {
            await changes.waitUntil { changes.status.isHalted || (changes.status.account == user && changes.storedChangeCount(account: user) == 0) }
        }
        guard changesSettled, !changes.status.isHalted else {
            return "Hang: the change engine did not settle for \(user) (status \(changes.status), \(changes.storedChangeCount(account: user)) change(s) stored, last error \(String(describing: changes.lastError)))."
        }
        if let message = checkZone(of: user) { return message }
        // One listener for each engine, on the server.
        await server.settle()
        guard await within({ await server.waitForListeners(count: 2) }) else {
            return "Listeners: the server runs \(server.listenerCount), and the device has two engines, one listener each."
        }
        log("quiet as \(user): every promise held")
        return nil
    }

    /// After every user's quiet point: each counter's increments, over both users' data, are the
    /// app's exactly (those made while the user switched included, in one user's data or the
    /// other's).
    func checkTotals() -> String? {
        for counter in Self.counters {
            let onServer = Self.users.reduce(0) { $0 + (Self.serverCounters(server, $1)[counter] ?? 0) }
            let queued = Self.users.reduce(0) { $0 + (increments[$1]?[counter] ?? 0) } + (unattributed[counter] ?? 0)
            if onServer != queued {
                return "\(onServer < queued ? "Lost" : "Applied twice"): \(counter) is \(onServer) on the server over both users, and the app queued \(queued) increment(s)."
            }
        }
        return nil
    }

    /// Every record sent for `user` is in their zone as last sent; no other user's is.
    private func checkZone(of user: String) -> String? {
        guard let zone = try? CollectionPath("users/\(user)/zones/sim/records") else { return nil }
        let stored = server.documents.filter { $0.key.parent == zone }
        for (path, document) in stored where !path.id.hasPrefix("\(user)-") {
            return "Another user's record \(path.id) is in \(user)'s zone: \(document.data)."
        }
        for (id, value) in sent[user, default: [:]] {
            guard let document = stored.first(where: { $0.key.id == id })?.value else {
                return "Lost: \(user)'s record \(id) (sent as \(value)) is not on the server."
            }
            if document.data["v"] != .string(value) {
                return "\(user)'s record \(id) is \(document.data["v"].map { "\($0)" } ?? "missing its value") on the server, and was last sent as \(value)."
            }
        }
        return nil
    }

    /// Whether the engine shows exactly the server's counters of `user`.
    static func shownMatches(_ shown: [SimulationCounter], server: MockServer, user: String) -> Bool {
        let onServer = serverCounters(server, user)
        return shown.count == onServer.count && shown.allSatisfy { $0.owner == user && onServer[$0.id] == $0.n }
    }

    static func serverCounters(_ server: MockServer, _ user: String) -> [String: Int] {
        guard let collection = try? CollectionPath("users/\(user)/counters") else { return [:] }
        var counters: [String: Int] = [:]
        for (path, document) in server.documents where path.parent == collection {
            counters[path.id] = document.data["n"]?.intValue ?? -1
        }
        return counters
    }
}
