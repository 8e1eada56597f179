import Foundation
import Synchronization
import Tandem
import TandemCore
import TandemServer

/// One run of a ``ClientSimulation``: the server, the device's engines and files, what the app was
/// told, and the seed's generator. Driven by one task, one step at a time.
final class SimulationWorld {
    static let users = ["ada", "bob"]
    static let counters = ["c0", "c1", "c2", "c3"]
    static let records = ["r0", "r1", "r2"]
    static let notes = ["n0", "n1", "n2"]

    let server: MockServer
    let directory: URL
    let clock = AcceleratedClock(factor: 500)
    let deadline: Duration
    let printsTrace: Bool
    var random: SeededRandomNumberGenerator
    var step = 0
    private(set) var trace: [String] = []

    var engine: CollectionSyncEngine<SimulationCounter>?
    var changes: ChangeSyncEngine?
    /// A synced handle on the user's notes, edited in place as an app does.
    var notes: SyncedCollection<SimulationNote>?
    /// What the app last wrote to each note, by user, and whether an edit made while the user
    /// switched may have come after it (in that user's data or refused, never another's).
    var noteTexts: [String: [String: (text: String, uncertain: Bool)]] = [:]
    /// The user the app asked the client to sign in as last (nil: signed out).
    var intended: String? = "ada"
    /// Whether the app listens (its last call was a start, not a stop).
    var listening = false
    /// Increments the app was told are queued, by user and counter.
    var increments: [String: [String: Int]] = [:]
    /// Increments queued while the user switched, by counter: the app's path for them names the
    /// user the client is signed in as when the engine reads it, which may already be the next
    /// one. Each is in one user's data or the other's, exactly once.
    var unattributed: [String: Int] = [:]
    /// The value last sent of each record, by user.
    var sent: [String: [String: String]] = [:]
    var nextValue = 0
    /// What the change engines told (failures, conflicts, halts), as trace lines, in order.
    let told = TraceInbox()
    private var listening_: [Task<Void, Never>] = []

    init(seed: UInt64, printsTrace: Bool, deadline: Duration) async throws {
        random = SeededRandomNumberGenerator(seed: seed)
        self.printsTrace = printsTrace
        self.deadline = deadline
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var documents: [Document] = []
        for user in Self.users {
            for counter in Self.counters {
                documents.append(Document(path: try DocumentPath("users/\(user)/counters/\(counter)"), data: ["id": .string(counter), "owner": .string(user), "n": 0], version: 0))
            }
        }
        server = try await MockServer.signedIn(as: "ada", documents: documents)
        try launch()
        log("launched, signed in as ada")
    }

    func close() {
        for task in listening_ { task.cancel() }
        engine = nil
        changes = nil
        notes = nil
        try? FileManager.default.removeItem(at: directory)
    }

    func log(_ line: String) {
        // What the engines told since the last step first, in the order they told it.
        for heard in told.take() {
            trace.append("  \(heard)")
            if printsTrace { print("  \(heard)") }
        }
        let line = "step \(step): \(line)"
        trace.append(line)
        if printsTrace { print(line) }
    }

    /// Makes the engines and the synced handle from the device's files, as a relaunched app does.
    func launch() throws {
        let client = server.client
        let remote = TandemRemoteCollectionService(client: client) {
            guard let uid = client.authState.uid else { throw TandemError(.unauthenticated, "Nobody is signed in.") }
            return try CollectionPath("users/\(uid)/counters")
        }
        engine = CollectionSyncEngine(remote: remote, managerKey: "sim-counters",
                                      persistence: try SQLiteCollectionPersistence(managerKey: "sim-counters", directory: directory),
                                      logger: TraceLogger(inbox: told),
                                      clock: clock, retryPolicy: RetryPolicy(initial: .milliseconds(200), maximum: .seconds(10), jitter: 0.2),
                                      random: SeededRandomNumberGenerator(seed: random.next()))
        let notesPath: @Sendable () -> String? = { client.authState.uid.map { "users/\($0)/notes" } }
        let notes = SyncedCollection(
            CollectionConfiguration<SimulationNote>(collectionPath: notesPath),
            remote: TandemRemoteCollectionService(client: client) {
                guard let path = notesPath() else { throw TandemError(.unauthenticated, "Nobody is signed in.") }
                return try CollectionPath(path)
            },
            persistence: try SQLiteCollectionPersistence(managerKey: "sim-notes", directory: directory), managerKey: "sim-notes",
            changeDelivery: .immediate)
        self.notes = notes
        Task.immediate { await notes.load() }
        var configuration = ChangeSyncEngine.Configuration(zoneName: "sim")
        configuration.directory = directory
        configuration.clock = clock
        let changes = try ChangeSyncEngine(client: client, configuration: configuration)
        self.changes = changes
        let told = told
        changes.machineTrace.withLock { $0 = MachineTrace { told.add("change \($0)") } }
        let events = changes.events()
        listening_.append(Task {
            for await event in events {
                let line: String? = switch event {
                case .sendFailed(_, let failures): "change engine: send failed for \(failures.map { "\($0.recordID): \($0.error)" })"
                case .conflictResolved(let conflict, let choice): "change engine: conflict on \(conflict.client.id) (client \(conflict.client["v"].map { "\($0)" } ?? "-"), server \(conflict.server["v"].map { "\($0)" } ?? "-")) resolved as \(choice["v"].map { "\($0)" } ?? "-")"
                case .stopped(let error): "change engine: halted: \(error)"
                case .sent(let results): "change engine: batch \(results.batch) saved \(results.saved.map { "\($0.record.id)=\($0.record["v"].map { "\($0)" } ?? "-")@\($0.record.metadata.version) (\($0.mutationID))" })"
                default: nil
                }
                if let line { told.add(line) }
            }
        })
        changes.start()
    }

    // MARK: Steps

    /// Takes the step the seed draws next; returns what broke, if anything.
    func takeStep() async -> String? {
        // Every step draws the same numbers whatever happens, so a seed always draws the same steps.
        let roll = Int(random.next() % 100)
        let a = Int(random.next() % 1_000)
        let b = Int(random.next() % 1_000)
        switch roll {
        case 0..<30: await write(counter: Self.counters[a % Self.counters.count], alsoSwitching: b % 10 == 0)
        case 30..<40: sendChange(record: Self.records[a % Self.records.count])
        case 40..<46: startListening()
        case 46..<50: stopListening(clearCaches: a % 2 == 0)
        case 50..<55: await blink()
        case 55..<61: await switchUser(to: b % 8 == 0 ? nil : Self.users[a % Self.users.count], awaited: b % 3 != 0)
        case 61..<64: await switchThereAndBack()
        case 64..<70: network(offline: a % 2 == 0)
        case 70..<74:
            server.dropNextAcknowledgements(1)
            log("the next acknowledgement is lost with the connection")
        case 74..<78:
            server.failNextCalls(1)
            log("the next request is refused as unavailable")
        case 78..<81:
            server.setLatency(.microseconds(a * 5))
            log("latency \(a * 5) µs")
        case 81..<86: changeEngine(start: a % 3 != 0)
        case 86..<91: await relaunch()
        case 91..<95: return await quiet(as: Self.users[a % Self.users.count])
        case 95..<99: editNote(Self.notes[a % Self.notes.count], alsoSwitching: b % 4 == 0)
        default:
            log("nothing")
        }
        if let broken = checkShownOwner() { return broken }
        return await checkListening()
    }

    /// The engine listens only while the app's last call was a start: a stop made right after a
    /// start leaves no listener running.
    private func checkListening() async -> String? {
        guard !listening, let engine else { return nil }
        await engine.core.barrier()
        if engine.core.isListening { return "Listening: the app's last call was a stop, and the engine still runs a listener." }
        return nil
    }

    /// Whether the device is settled as `intended`: the client, and both engines, are that user's.
    var isSettled: Bool {
        guard let uid = intended, server.client.authState.uid == uid, let engine, engine.core.spaceUser == uid,
              changes?.status.account == uid else { return false }
        return true
    }

    private func write(counter: String, alsoSwitching: Bool) async {
        guard isSettled, let engine, let uid = intended else {
            log("write \(counter): skipped (not settled)")
            return
        }
        if alsoSwitching {
            // The switch starts while the write is on its way.
            let writing = Task { try await engine.updateDocument(id: counter, data: ["n": .increment(1)]) }
            let other = Self.users.first { $0 != uid }!
            intended = other
            try? server.requestUser(other)
            do {
                try await writing.value
                unattributed[counter, default: 0] += 1
                log("write \(uid)/\(counter) while switching to \(other): queued")
            } catch {
                log("write \(uid)/\(counter) while switching to \(other): refused (\(error))")
            }
            return
        }
        do {
            try await engine.updateDocument(id: counter, data: ["n": .increment(1)])
            increments[uid, default: [:]][counter, default: 0] += 1
            log("write \(uid)/\(counter): queued")
        } catch {
            log("write \(uid)/\(counter): refused (\(error))")
        }
    }

    private func sendChange(record: String) {
        guard isSettled, let changes, let uid = intended else {
            log("send \(record): skipped (not settled)")
            return
        }
        nextValue += 1
        let id = "\(uid)-\(record)"
        let value = "v\(nextValue)"
        do {
            try changes.sendChanges(modify: [SyncedRecord(id: id, type: "Note", properties: ["v": .value(.string(value))], metadata: RecordMetadata(version: Version(0)))], delete: [])
            sent[uid, default: [:]][id] = value
            log("send \(id) = \(value): queued; \(uid)'s queue: \(changes.storedChanges(account: uid))")
        } catch {
            log("send \(id): refused (\(error))")
        }
    }

    /// An edit of the synced handle's value: a note's text, made as the user whose data the handle
    /// shows, and that user's name written in the note. With `alsoSwitching`, a switch to the
    /// other user is asked for just before the edit, which the app makes on the value it still
    /// shows: the edit is in the first user's data or refused, never in the other's.
    private func editNote(_ note: String, alsoSwitching: Bool) {
        guard isSettled, let notes, let uid = intended, notes.engine.core.spaceUser == uid else {
            log("edit \(note): skipped (not settled)")
            return
        }
        nextValue += 1
        let text = "t\(nextValue)"
        let other = Self.users.first { $0 != uid }!
        if alsoSwitching {
            intended = other
            try? server.requestUser(other)
        }
        notes.withLock { value in
            if let index = value.firstIndex(where: { $0.documentId == note }) {
                value[index].text = text
                value[index].owner = uid
            } else {
                value.append(SimulationNote(documentId: note, owner: uid, text: text))
            }
        }
        guard alsoSwitching else {
            noteTexts[uid, default: [:]][note] = (text, false)
            log("edit \(uid)/\(note) = \(text)")
            return
        }
        if let last = noteTexts[uid]?[note] { noteTexts[uid]?[note] = (last.text, true) }
        log("switch to \(other), and edit \(uid)/\(note) = \(text) at once")
    }

    private func startListening() {
        guard let engine else { return }
        listening = true
        // Called now: its first step is queued before the next call the app makes.
        Task.immediate { await engine.startListening() }
        log("start listening")
    }

    private func stopListening(clearCaches: Bool) {
        listening = false
        engine?.stopListening(clearCaches: clearCaches)
        log("stop listening\(clearCaches ? ", clearing the cache" : "")")
    }

    /// A view that appears and disappears at once: a start, and a stop right after it.
    private func blink() async {
        guard let engine else { return }
        let starting = Task.immediate { await engine.startListening() }
        engine.stopListening()
        listening = false
        log("start listening, and stop at once")
        _ = starting
    }

    private func switchUser(to uid: String?, awaited: Bool) async {
        intended = uid
        try? server.requestUser(uid)
        // Offline, the server hears the switch only once the client is back: nothing to await.
        let awaited = awaited && server.client.status.connection != .offline
        log("switch to \(uid ?? "nobody")\(awaited ? ", awaited" : "")")
        if awaited, let engine, let changes {
            // Signing out does not switch the engine's space (it keeps showing the last user's).
            if uid != nil, !(await within { await engine.waitUntil { engine.core.spaceUser == uid } }) {
                log("  the engine did not move to \(uid ?? "nobody") (it is \(engine.core.spaceUser ?? "nobody")'s; the client is \(server.client.authState))")
            }
            if !(await within { await changes.waitUntil { changes.status.account == uid } }) {
                log("  the change engine did not move to \(uid ?? "nobody") (status \(changes.status); the client is \(server.client.authState))")
            }
        }
    }

    private func switchThereAndBack() async {
        guard let uid = intended else { return }
        let other = Self.users.first { $0 != uid }!
        try? server.requestUser(other)
        try? server.requestUser(uid)
        log("switch to \(other) and back to \(uid) at once")
    }

    private func network(offline: Bool) {
        if offline { server.goOffline() } else { server.goOnline() }
        log(offline ? "offline" : "online")
    }

    private func changeEngine(start: Bool) {
        if start { changes?.start() } else { changes?.stop() }
        log(start ? "change engine started" : "change engine stopped")
    }

    private func relaunch() async {
        engine = nil
        changes = nil
        notes = nil
        listening = false
        do {
            try launch()
            log("relaunched")
        } catch {
            log("relaunch failed: \(error)")
        }
    }

    /// What the engine shows is one user's: never a mix of two users' counters.
    private func checkShownOwner() -> String? {
        guard let shown = engine?.currentCollection else { return nil }
        let owners = Set(shown.map(\.owner))
        if owners.count > 1 { return "The engine showed two users' documents at once: \(shown)." }
        return nil
    }

    /// Runs `body` until it returns or the deadline passes: false then.
    func within(_ body: @escaping @Sendable () async -> Bool) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { await body() }
            group.addTask { [deadline] in
                try? await ContinuousClock().sleep(for: deadline)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}

/// Lines the engines' event streams add from their own tasks, taken into the trace at each step.
final class TraceInbox: Sendable {
    private let lines = Mutex<[String]>([])

    func add(_ line: String) { lines.withLock { $0.append(line) } }

    func take() -> [String] {
        lines.withLock { lines in
            defer { lines = [] }
            return lines
        }
    }
}

/// The collection engine's events, into the trace (all but the busiest).
struct TraceLogger: DataSyncLogger {
    let inbox: TraceInbox

    func trackEvent(_ event: DataSyncLogEvent) {
        inbox.add("engine: \(event)")
    }
}
