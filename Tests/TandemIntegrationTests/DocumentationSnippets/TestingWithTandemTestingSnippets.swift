import Foundation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The testing article's code: each region is part of a test that runs.
@Suite("Testing with TandemTesting article", .timeLimit(.minutes(5)))
struct TestingWithTandemTestingSnippets {
    struct Item: SyncModel, Equatable {
        let id: String
        var name: String
        var stock: Int
    }

    @Test("a lost acknowledgement: the write is sent again and applied once")
    func lostAcknowledgement() async throws {
        // snippet: testing-mock-remote
        let remote = MockRemoteCollectionService(
            collection: [Item(id: "lamp", name: "Lamp", stock: 3)], collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: nil)
        await engine.startListening()

        remote.store.dropNextAcknowledgements(1)      // applied by the server, the answer lost
        try await engine.updateDocument(id: "lamp", data: ["stock": .increment(5)])
        #expect(engine.hasPendingWrites)              // so the write is still queued

        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(remote.store.appliedWriteCount == 1)  // sent twice, applied once
        #expect(engine.getDocument(id: "lamp")?.stock == 8)
        // end snippet
    }

    @Test("a signed-in mock: the change-sync engine sends as Ada, then follows Bob")
    func signedInMock() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("snippet-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let note = SyncedRecord(id: "n1", type: "Note", properties: ["title": .value("Groceries")], metadata: RecordMetadata(version: Version(0)))
        // snippet: testing-signed-in
        let server = try await MockServer.signedIn(as: "ada")    // tokens and rules: each user owns users/{uid}
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.directory = directory
        let engine = try ChangeSyncEngine(client: server.client, configuration: configuration)
        engine.start()
        let results = try await engine.send(modify: [note], delete: [])
        #expect(results.count == 1)
        #expect(server.documents[try DocumentPath("users/ada/zones/notes/records/n1")] != nil)

        try await server.signIn(as: "bob")                        // the engine follows the client
        #expect(await engine.waitUntil { engine.status.account == "bob" })
        // end snippet
    }

    @Test("a refusal rolls the write back, lists it and logs it")
    func refusal() async throws {
        // snippet: testing-refusal
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteCollectionService(
            collection: [Item(id: "lamp", name: "Lamp", stock: 3)], collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: nil, logger: logger)
        await engine.startListening()

        remote.store.failNextCalls(1, with: TandemError(.permissionDenied, "Not yours."))
        await #expect(throws: TandemError.self) {
            try await engine.updateDocument(id: "lamp", data: ["stock": 0])
        }
        #expect(engine.getDocument(id: "lamp")?.stock == 3)          // rolled back
        #expect(engine.rejectedWrites.map(\.error.code) == [.permissionDenied])
        #expect(logger.names.contains("items_update_fail"))
        // end snippet
    }

    @Test("retries on a manual clock: nothing waits on real time")
    func manualClock() async throws {
        // snippet: testing-manual-clock
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(
            collection: [Item(id: "lamp", name: "Lamp", stock: 3)], collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: nil, clock: clock)

        remote.store.failNextCalls(2)                 // the first load and its first retry fail
        await engine.startListening()                 // returns with the (empty) cache
        await clock.waitForSleepers(count: 1)         // the retry sleeps 2 s…
        clock.advance(by: .seconds(2))
        await clock.waitForSleepers(count: 1)         // …fails, and sleeps 4 s
        clock.advance(by: .seconds(4))
        #expect(await engine.waitUntil { engine.currentCollection.count == 1 })
        // end snippet
        engine.stopListening()
    }

    @Test("the real server on a real socket")
    func liveServer() async throws {
        // snippet: testing-live-server
        let server = try await LiveServer.start()     // SQLite in a temporary directory, a free port
        let client = TandemClient(url: server.url)
        let running = Task { try await client.run() }
        await client.waitUntilConnected()
        let ack = try await client.commit([
            Mutation(path: try DocumentPath("items/lamp"), kind: .set(["name": "Lamp", "stock": 3])),
        ])
        #expect(ack[0].status == .applied)
        running.cancel()
        await server.stop()
        // end snippet
    }
}

// snippet: testing-conformance
/// Your own `ServerStore`, held to the same contract as the SQLite and PostgreSQL stores.
@Suite struct MyStoreConformance {
    static let subject = ServerStoreConformance.Subject(name: "memory") {
        let store = MemoryServerStore(clock: ManualClock())
        return .init(store: store, reopen: { store }, openShared: { store })
    }

    @Test(arguments: ServerStoreConformance.checks + ServerStoreConformance.sharedChecks)
    func conforms(_ check: ServerStoreConformance.Check) async throws {
        try await check.run(on: Self.subject)
    }
}
// end snippet

// snippet: testing-simulation
/// The app's promises under the steps each seed draws: `TANDEM_SIM_SEEDS=N` runs N seeds,
/// `TANDEM_SIM_SEED=S` replays one, `TANDEM_SIM_TRACE=1` prints each step.
@Suite("Client simulation", .timeLimit(.minutes(10)))
struct ClientSimulationTests {
    @Test(arguments: ClientSimulation.seeds(defaultCount: 12))
    func promisesHold(seed: UInt64) async {
        let simulation = ClientSimulation(steps: 40, printsTrace: ClientSimulation.tracing)
        if let failure = await simulation.run(seed: seed) {
            Issue.record("\(failure)\n\(failure.trace.suffix(400).joined(separator: "\n"))")
        }
    }
}
// end snippet
