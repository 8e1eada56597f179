import Foundation
import GRDB
import GRDBSQLite
import Synchronization
import Testing
@testable import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The change-sync engine's awaited sends, its failures as the app sees them, and its file shared
/// with another engine: on a signed-in mock server.
@Suite("Change sync sends and failures", .timeLimit(.minutes(2)))
struct ChangeSyncSendTests {
    func note(_ id: String, _ title: String, version: UInt64 = 0) -> SyncedRecord {
        SyncedRecord(id: id, type: "Note", properties: ["title": .value(.string(title))], metadata: RecordMetadata(version: Version(version)))
    }

    func engine(_ server: MockServer, _ directory: TemporaryDirectory, configure: (inout ChangeSyncEngine.Configuration) -> Void = { _ in }) throws -> ChangeSyncEngine {
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.directory = directory.url
        configure(&configuration)
        return try ChangeSyncEngine(client: server.client, configuration: configuration)
    }

    /// The records of the changes queued in the engine's file for ada.
    func queued(_ engine: ChangeSyncEngine) throws -> [String] {
        try engine.store.pending(account: "ada").map(\.recordID)
    }

    func title(_ outcome: SendOutcome) -> JSONValue? {
        guard case .saved(let sent) = outcome else { return nil }
        return sent.record["title"]
    }

    @Test("send(modify:delete:) answers each record, in the order given, across a batch split in three; a deletion is answered as one; a record given twice is answered twice")
    func answersEachRecord() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let engine = try engine(server, directory) { $0.maxRecordsPerBatch = 2 }
        engine.start()
        let notes = (1...5).map { note("n\($0)", "Note \($0)") }
        let outcomes = try await engine.send(modify: notes, delete: [])
        #expect(outcomes.map(\.recordID) == ["n1", "n2", "n3", "n4", "n5"])
        #expect(outcomes.map(title) == notes.map { $0["title"] })
        for outcome in outcomes {
            guard case .saved(let sent) = outcome else { Issue.record("not saved: \(outcome)"); continue }
            #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/\(sent.record.id)")]?.version == sent.record.metadata.version)
        }
        let saved = outcomes.compactMap { if case .saved(let sent) = $0 { sent.record } else { nil } }
        var edited = saved[0]
        edited.properties["title"] = .value("Note 1, edited")
        let next = try await engine.send(modify: [edited, edited], delete: [RecordDeletion(recordID: "n2", recordType: "Note")])
        #expect(next.map(\.recordID) == ["n1", "n1", "n2"])
        #expect(title(next[0]) == "Note 1, edited")
        guard case .deleted(let deletion) = next[2] else { Issue.record("n2 not deleted: \(next[2])"); return }
        #expect(deletion.recordID == "n2")
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")] == nil)
    }

    @Test("a send that meets a conflict is answered with the resolution, as the server has it")
    func answersWithTheResolution() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let engine = try engine(server, directory)
        engine.start()
        let first = try await engine.send(modify: [note("n1", "Groceries")], delete: [])
        guard case .saved(let sent) = first[0] else { Issue.record("not saved: \(first)"); return }
        // Another device changed it meanwhile: the server's version is newer than this one's base.
        let path = try DocumentPath("users/ada/zones/notes/records/n1")
        var theirs = try #require(server.documents[path]).data
        theirs["body"] = "eggs"
        _ = try server.commit([.set(path, theirs)])
        var mine = sent.record
        mine.properties["title"] = .value("Groceries for Sunday")
        let outcomes = try await engine.send(modify: [mine], delete: [])
        guard case .saved(let resolved) = outcomes[0] else { Issue.record("not saved: \(outcomes)"); return }
        #expect(resolved.record["title"] == "Groceries for Sunday")
        #expect(resolved.record["body"] == "eggs")
        #expect(server.documents[path]?.version == resolved.record.metadata.version)
        #expect(server.documents[path]?.data["body"] == "eggs" && server.documents[path]?.data["title"] == "Groceries for Sunday")
    }

    @Test("a halted engine refuses a send at once and queues nothing; a send awaited when the engine halts ends with the halt's error, its change still queued")
    func haltedEngine() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let engine = try engine(server, directory)
        engine.start()
        _ = try await engine.send(modify: [note("n1", "First")], delete: [])
        // The next request (the send's write) is refused for good: the engine halts.
        server.failNextWrites(1, with: TandemError(.permissionDenied, "Refused on purpose."))
        await #expect {
            _ = try await engine.send(modify: [note("n2", "Second")], delete: [])
        } throws: { ($0 as? TandemError)?.code == .permissionDenied }
        #expect(engine.status.isHalted)
        #expect((engine.lastError as? TandemError)?.code == .permissionDenied)
        #expect(engine.status.failure?.code == .permissionDenied)
        #expect(try queued(engine) == ["n2"], "n2 stays queued")

        await #expect {
            _ = try await engine.send(modify: [note("n3", "Third")], delete: [])
        } throws: { ($0 as? TandemError)?.code == .failedPrecondition }
        #expect(try queued(engine) == ["n2"], "n3 was not queued")

        // Started again, the queued change goes, and nothing else.
        engine.start()
        #expect(await engine.waitUntil { engine.pendingCount == 0 && !engine.status.isHalted })
        #expect(engine.status.failure == nil)
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")] != nil)
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n3")] == nil)
    }

    @Test("a send whose task is cancelled ends with CancellationError, and its change still goes")
    func cancelledSend() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let engine = try engine(server, directory)
        engine.start()
        _ = try await engine.send(modify: [note("n1", "First")], delete: [])
        server.goOffline()
        let send = Task { try await engine.send(modify: [note("n2", "Second")], delete: []) }
        #expect(await engine.waitUntil { (try? queued(engine)) == ["n2"] })
        send.cancel()
        await #expect(throws: CancellationError.self) { _ = try await send.value }
        server.goOnline()
        engine.start()
        #expect(await engine.waitUntil { engine.pendingCount == 0 })
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")]?.data["title"] == "Second")
    }

    @Test("a failure that is retried sets the status's failure and lastError with its reason; the retry waits on the configured clock, and its success clears the failure")
    func retriedFailureHasItsReason() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let engine = try engine(server, directory) { $0.clock = clock }
        engine.start()
        _ = try await engine.send(modify: [note("n1", "First")], delete: [])
        server.failNextWrites(1)
        try engine.sendChanges(modify: [note("n2", "Second")], delete: [])
        #expect(await engine.waitUntil { engine.status.retryCount == 1 })
        #expect(engine.status.failure?.code == .unavailable)
        #expect((engine.lastError as? TandemError)?.code == .unavailable)
        #expect(try queued(engine) == ["n2"])
        // The retry waits for the backoff on the engine's clock, and goes once it passes.
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(120))
        #expect(await engine.waitUntil { engine.pendingCount == 0 })
        #expect(engine.status.failure == nil && engine.status.retryCount == 0)
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")] != nil)
    }

    @Test("offline, the engine tries nothing and counts no failure however long it waits; back online, it sends at once")
    func waitsForTheConnection() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let engine = try engine(server, directory) { $0.clock = clock }
        engine.start()
        _ = try await engine.send(modify: [note("n1", "First")], delete: [])
        server.goOffline()
        #expect(await engine.waitUntil { engine.status.isWaitingForConnection })
        let sending = Task { try await engine.send(modify: [note("n2", "Second")], delete: []) }
        #expect(await engine.waitUntil { engine.pendingCount == 1 })
        // An hour on the engine's clock: no retry, no halt.
        for _ in 0..<60 {
            clock.advance(by: .seconds(60))
            await engine.barrier()
        }
        #expect(engine.status.retryCount == 0 && !engine.status.isHalted && engine.status.isRunning)
        #expect(try queued(engine) == ["n2"])
        server.goOnline()
        let outcomes = try await sending.value
        #expect(outcomes.map(\.recordID) == ["n2"])
        guard case .saved? = outcomes.first else {
            Issue.record("n2 was not saved: \(outcomes)")
            return
        }
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")] != nil)
        #expect(!engine.status.isWaitingForConnection && engine.status.failure == nil)
    }

    @Test("an engine made on a zone file while another engine of it lives takes it over: the older one stops (its awaited send throws, the change stays queued) and queues nothing more; the newer one sends what it left")
    func newerEngineTakesTheFileOver() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let first = try engine(server, directory)
        first.start()
        _ = try await first.send(modify: [note("n1", "First")], delete: [])
        server.goOffline()
        let waiting = Task { try await first.send(modify: [note("n2", "Queued by the first")], delete: []) }
        #expect(await first.waitUntil { (try? first.store.pending(account: "ada").map(\.recordID)) == ["n2"] })

        let second = try engine(server, directory)
        #expect(try queued(second) == ["n2"])
        #expect(!first.status.isRunning)
        await #expect(throws: TandemError.self) { try await waiting.value }
        do {
            try first.sendChanges(modify: [note("n3", "Too late")], delete: [])
            Issue.record("a superseded engine queued a change")
        } catch let error as TandemError {
            #expect(error.code == .failedPrecondition)
        }
        server.goOnline()
        second.start()
        #expect(await second.waitUntil { second.status.isRunning && second.status.account == "ada" && second.storedChangeCount(account: "ada") == 0 })
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n2")] != nil)
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n3")] == nil)
    }

    @Test("a fetch asked while nobody is signed in is kept, and runs once a user signs in")
    func fetchAskedWhileSignedOut() async throws {
        let server = try await MockServer.signedIn(as: nil)
        let directory = TemporaryDirectory()
        let asked = try engine(server, directory)
        let control = try engine(server, directory) { $0.zoneName = "other" }
        #expect(await asked.waitUntil { asked.status.account == nil })
        asked.fetchChanges(token: nil)
        try await server.signIn(as: "ada")
        #expect(await asked.waitUntil { asked.status.account == "ada" })
        #expect(await control.waitUntil { control.status.account == "ada" })
        // Neither runs (not started): the asked fetch waits in the queue.
        #expect(asked.pendingCount == control.pendingCount + 1)
    }

    @Test("a second engine on the same zone's file waits while another connection writes it, instead of failing with 'database is locked'")
    func secondEngineWaitsForTheFile() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let first = try engine(server, directory)
        let second = try engine(server, directory)
        // Another connection to the file holds its write lock.
        var holder: OpaquePointer?
        #expect(sqlite3_open_v2(first.store.queue.path, &holder, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK)
        defer { sqlite3_close(holder) }
        #expect(sqlite3_exec(holder, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)
        let (waits, waited) = AsyncStream.makeStream(of: Int.self)
        second.store.busyWaits.onWait { waited.yield($0) }
        let queueing = Task { try await second.enqueue(modify: [note("n1", "Queued while locked")], delete: []) }
        for await _ in waits { break }
        #expect(sqlite3_exec(holder, "COMMIT", nil, nil, nil) == SQLITE_OK)
        try await queueing.value
        second.store.busyWaits.onWait(nil)
        #expect(second.pendingCount == 1)
        #expect(try first.store.pending(account: "ada").map(\.recordID) == ["n1"], "in the shared file")
    }

    @Test("a write made for one user is never sent on a connection signed in as another: it fails as unavailable (kept by its sender), and goes once that user is back")
    func writeMadeForAnotherUser() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        var request = WriteRequest([Mutation(path: try DocumentPath("users/bob/notes/n1"), kind: .set(["title": "Bob's"]), id: MutationID(clientID: "bobs-writer", sequence: 1))])
        request.madeFor = .some("bob")
        let refused = await server.client.startWrites([request]).answers()
        guard case .failure(let error as TandemError) = refused[0] else { Issue.record("sent as ada: \(refused)"); return }
        #expect(error.code == .unavailable)
        #expect(server.commitCount == 0, "nothing reached the server")
        try await server.signIn(as: "bob")
        let sent = await server.client.startWrites([request]).answers()
        #expect((try? sent[0].get())?.first?.status == .applied)
        #expect(server.documents[try DocumentPath("users/bob/notes/n1")] != nil)
    }

    @Test("two changes of one record sent together (one sent before a relaunch, one queued after it) both meet conflicts: their resolutions are one change, sent once, and nothing stays in the file")
    func twoConflictsOfOneRecord() async throws {
        let server = try await MockServer.signedIn(as: "ada")
        let directory = TemporaryDirectory()
        let path = try DocumentPath("users/ada/zones/notes/records/n1")
        var saved = ChangeSyncEngine.State()
        do {
            let first = try engine(server, directory)
            first.start()
            _ = try await first.send(modify: [note("n1", "v1")], delete: [])
            first.stop()
            await first.barrier()
            saved = first.state
            // Both based on no version, so both conflict with v1: the first sent alone (after an
            // atomic refusal put it back) before the engine went, the second queued after it.
            let records = try CollectionPath("users/ada/zones/notes/records")
            let fields: (ChangeQueueStore.Row) throws -> JSONObject = { try RecordCoding.fields(of: $0.record!, encryption: nil) }
            let sent = try first.store.enqueue(account: "ada", saves: [note("n1", "v4")], deletions: [])
            _ = try first.store.prepare(account: "ada", records: records, rowIDs: sent.map(\.rowID), fields: fields)
            _ = try first.store.settle(account: "ada", [], undecided: sent.map(\.rowID), requeue: [])
            _ = try first.store.prepare(account: "ada", records: records, rowIDs: sent.map(\.rowID), fields: fields)
            _ = try first.store.enqueue(account: "ada", saves: [note("n1", "v5")], deletions: [])
        }
        let applied = server.appliedWriteCount
        // With its state, as an app gives it back: the zone is not made again.
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.directory = directory.url
        configuration.resolver = .clientWins
        let relaunched = try ChangeSyncEngine(client: server.client, configuration: configuration, state: saved)
        relaunched.start()
        #expect(await relaunched.waitUntil(timeout: .seconds(60)) {
            relaunched.storedChangeCount(account: "ada") == 0 && server.documents[path]?.data["title"] == "v5"
        }, "stored: \(relaunched.storedChanges(account: "ada")), server: \(String(describing: server.documents[path]?.data))")
        #expect(server.appliedWriteCount - applied == 1, "the two conflicts' one resolution, sent once")
        #expect(!relaunched.status.isHalted)
    }
}
