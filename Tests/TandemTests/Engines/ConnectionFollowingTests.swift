import Foundation
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// Engines follow their remote's connection: while it is down they wait for it instead of retrying
/// on their own backoff, and they go on the moment it is back. The client's reconnection is the
/// only retry loop.
@Suite("Engines follow the connection", .timeLimit(.minutes(5)))
struct ConnectionFollowingTests {
    @Test("the client tells each observer of the connection going and coming back, once each, in order; a new observer of a down connection (or of one not made yet) hears so at once")
    func clientEvents() async throws {
        // A client counts as disconnected until its first connection.
        let unstarted = TandemClient(url: URL(string: "ws://127.0.0.1:9/v1/stream")!)
        let heard = Locked<[ConnectionEvent]>([])
        let early = unstarted.observeConnection { event in heard.withLock { $0.append(event) } }
        #expect(heard.withLock { $0 } == [.disconnected])
        early.cancel()

        let store = MockServer()
        let events = Locked<[ConnectionEvent]>([])
        let observation = store.client.observeConnection { event in events.withLock { $0.append(event) } }
        await store.client.waitUntilConnected()
        // Made before the first connection, the observer heard it down, then back; after, nothing.
        #expect(await events.wait(until: { $0.last != .disconnected }))
        #expect([[], [.disconnected, .resumed]].contains(events.withLock { $0 }))
        events.withLock { $0 = [] }
        store.goOffline()
        store.goOffline()
        store.goOnline()
        await store.client.waitUntilConnected()
        #expect(await events.wait(until: { $0 == [.disconnected, .resumed] }))
        store.goOffline()
        let late = Locked<[ConnectionEvent]>([])
        var lateObservation: ConnectionObservation? = store.client.observeConnection { event in late.withLock { $0.append(event) } }
        #expect(late.withLock { $0 } == [.disconnected])
        observation.cancel()
        store.goOnline()
        await store.client.waitUntilConnected()
        #expect(await late.wait(until: { $0 == [.disconnected, .resumed] }))
        #expect(events.withLock { $0 } == [.disconnected, .resumed, .disconnected], "a cancelled observation hears nothing more")
        #expect(store.client.connectionObserverCount == 1)
        #expect(lateObservation != nil)
        lateObservation = nil
        #expect(store.client.connectionObserverCount == 0, "freed, an observation is gone")
    }

    @Test("a document engine's listener waits out a lost connection with no backoff and resumes from its version when it is back")
    func documentEngine() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 1), collectionPath: { "users" })
        let engine = DocumentSyncEngine<UserModel>(remote: remote, managerKey: "profile", persistence: nil, logger: logger, clock: clock)
        try await engine.startListening(documentId: "ada")
        #expect(engine.currentDocument?.visits == 1)
        remote.store.goOffline()
        #expect(await logger.wait(forEventNamed: "profile_connection_lost"))
        try await engine.updateDocument(data: ["visits": .increment(1)])
        #expect(engine.currentDocument?.visits == 2 && engine.hasPendingWrites)
        #expect(clock.sleeperCount == 0)
        remote.store.goOnline()
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        try remote.simulateUpdate(UserModel(id: "ada", name: "Ada L.", visits: 2))
        #expect(await engine.waitUntil { engine.currentDocument?.name == "Ada L." })
        #expect(clock.sleeperCount == 0)
        #expect(logger.names.filter { $0.hasSuffix("_retrying") }.isEmpty)
    }

    @Test("a pass-through stream waits out a lost connection and goes on from its last version when it is back")
    func passThrough() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: clock)
        let (updates, _) = engine.streamCollectionUpdates()
        var iterator = updates.makeAsyncIterator()
        #expect(Set([try await iterator.next()?.id, try await iterator.next()?.id]) == ["lamp", "desk"])
        remote.store.goOffline()
        #expect(await remote.store.waitForListeners(count: 0))
        remote.store.goOnline()
        try remote.simulateUpdate(Product(id: "cup", name: "Cup", price: 4, stock: 9))
        // Only what changed after its version: no snapshot again.
        #expect(try await iterator.next()?.id == "cup")
        #expect(clock.sleeperCount == 0)
    }

    @Test("an engine made before its client first connects waits for it, then listens and sends at once, with nothing asleep on its clock")
    func engineBeforeFirstConnection() async throws {
        let server = try await LiveServer.start()
        let collection = try CollectionPath("early")
        _ = try await server.store.commit([.set(try collection.document("lamp"), ["id": "lamp", "name": "Lamp", "price": 30, "stock": 3])])
        var configuration = TandemClientConfiguration()
        configuration.clientID = "early-engine"
        let client = TandemClient(url: server.url, configuration: configuration)
        let clock = ManualClock()
        let engine = CollectionSyncEngine<Product>(remote: TandemRemoteCollectionService(client: client, collection: collection),
                                                   managerKey: "early", persistence: nil, clock: clock)
        await engine.startListening()  // the client is not running: the cache shows, nothing backs off
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        #expect(engine.currentCollection.map(\.id) == ["rug"] && clock.sleeperCount == 0)
        let running = Task { try await client.run() }
        #expect(await engine.waitUntil { !engine.hasPendingWrites && engine.currentCollection.count == 2 })
        #expect(clock.sleeperCount == 0)
        running.cancel()
        _ = try? await running.value
        await server.stop()
    }

    @Test("a first snapshot adopted whole shows the listened query's answer")
    func adoptedSnapshotUnderQuery() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let products = (0..<200).map { Product(id: String(format: "p%03d", $0), name: "n\($0)", price: Double($0), stock: 1) }
        let remote = MockRemoteCollectionService(collection: products, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "adopted",
                                                   persistence: try SQLiteCollectionPersistence(managerKey: "adopted", directory: directory.url))
        await engine.startListening { $0.whereField("price", isLessThan: 10).order(by: "price", descending: true) }
        #expect(engine.currentCollection.map(\.id) == (0..<10).reversed().map { String(format: "p%03d", $0) })
    }
}

@Suite("Watched values", .timeLimit(.minutes(5)))
struct WatchedValueTests {
    @Test("a wait returns when the value comes to satisfy it, at once when it already does, and when its task is cancelled")
    func waits() async {
        let watched = WatchedValue(0)
        let waiting = Task { await watched.wait { $0 >= 3 } }
        watched.update { $0 = 1 }
        watched.update { $0 = 3 }
        await waiting.value
        await watched.wait { $0 == 3 }
        let never = Task { await watched.wait { $0 < 0 } }
        never.cancel()
        await never.value
        #expect(watched.value == 3)
    }
}
