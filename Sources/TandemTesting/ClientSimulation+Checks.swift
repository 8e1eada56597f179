import Foundation
import Tandem
import TandemCore

extension SimulationWorld {
    /// Brings the device online as `user`, waits for the engines and the synced handle to settle, and checks every
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
        if let message = await checkNotes(of: user) { return message }
        // One listener for each engine (the synced handle's included), on the server.
        await server.settle()
        guard await within({ await server.waitForListeners(count: 3) }) else {
            return "Listeners: the server runs \(server.listenerCount), and the device has three engines, one listener each."
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

    /// The synced handle settles on `user`'s notes, exactly the server's; each note there is
    /// `user`'s (written while the handle showed their data), and holds the text last written to
    /// it unless an edit made while the user switched may have come after.
    private func checkNotes(of user: String) async -> String? {
        guard let notes else { return "No synced handle." }
        let server = self.server
        let signals = notes.changeSignals()
        Task.immediate { await notes.load() }
        let settled = await within {
            var changes = signals.makeAsyncIterator()
            while true {
                if notes.engine.core.spaceUser == user && !notes.hasPendingWrites && Self.notesMatch(notes.value, server: server, user: user) {
                    return true
                }
                guard await changes.next() != nil else { return false }
            }
        }
        guard settled else {
            return "Hang: \(user)'s synced notes did not settle (the handle shows \(notes.engine.core.spaceUser ?? "nobody")'s data, pending \(notes.hasPendingWrites), last error \(notes.lastError.map { "\($0)" } ?? "none")): it shows \(notes.value.map { "\($0.documentId ?? "-")=\($0.text)" }), the server has \(Self.serverNotes(server, user))."
        }
        let onServer = Self.serverNotes(server, user)
        for (id, note) in onServer where note.owner != user {
            return "Another user's edit is in \(user)'s data: note \(id) was written as \(note.owner)'s (\(note.text))."
        }
        for (id, written) in noteTexts[user, default: [:]] {
            guard let note = onServer[id] else { return "Lost: \(user)'s note \(id) (last written \(written.text)) is not on the server." }
            if !written.uncertain && note.text != written.text {
                return "\(user)'s note \(id) is \(note.text) on the server, and was last written \(written.text)."
            }
        }
        return nil
    }

    static func notesMatch(_ shown: some Collection<SimulationNote>, server: MockServer, user: String) -> Bool {
        let onServer = serverNotes(server, user)
        return shown.count == onServer.count && shown.allSatisfy { note in note.documentId.flatMap { onServer[$0] }.map { $0.text == note.text && $0.owner == note.owner } ?? false }
    }

    static func serverNotes(_ server: MockServer, _ user: String) -> [String: (owner: String, text: String)] {
        guard let collection = try? CollectionPath("users/\(user)/notes") else { return [:] }
        var notes: [String: (owner: String, text: String)] = [:]
        for (path, document) in server.documents where path.parent == collection {
            notes[path.id] = (document.data["owner"]?.stringValue ?? "-", document.data["text"]?.stringValue ?? "-")
        }
        return notes
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
