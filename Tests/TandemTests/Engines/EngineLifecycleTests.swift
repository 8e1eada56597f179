import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// What an engine leaves behind when the app drops it without `stopListening()`.
@Suite("Engine lifecycle")
struct EngineLifecycleTests {
    @Test("a collection engine dropped while its calls fail leaves no retry asleep on the clock", .timeLimit(.minutes(5)))
    func collectionEngineDropped() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        #expect(remote.store.client.connectionObserverCount == 0)
        remote.store.failNextCalls(1_000)
        var engine: CollectionSyncEngine<Product>? = CollectionSyncEngine(remote: remote, managerKey: "products", persistence: nil, clock: clock)
        #expect(remote.store.client.connectionObserverCount == 1)
        await engine?.startListening()
        try await engine?.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        // The server answers with errors while connected: the listener and the sender each wait out a backoff.
        await clock.waitForSleepers(count: 2)
        weak let dropped = engine
        let executor = try #require(engine?.core.queue)
        engine = nil
        #expect(dropped == nil)
        // The engine's shutdown runs on its executor, after every step queued before it.
        await executor.run {}
        #expect(clock.sleeperCount == 0)
        // Nor does it stay registered for the client's connection events.
        #expect(remote.store.client.connectionObserverCount == 0)
        // Time passing wakes nothing: no retry reaches the server.
        let calls = remote.store.commitCount
        remote.store.failNextCalls(0)
        clock.advance(by: .seconds(3600))
        remote.store.goOffline()
        remote.store.goOnline()
        await remote.store.client.waitUntilConnected()
        #expect(remote.store.commitCount == calls)
        #expect(remote.store.listenerCount == 0)
    }

    @Test("a document engine dropped while its calls fail leaves no retry asleep on the clock", .timeLimit(.minutes(5)))
    func documentEngineDropped() async throws {
        let clock = ManualClock()
        let remote = MockRemoteDocumentService(collectionPath: { "users" })
        remote.store.failNextCalls(1_000)
        var engine: DocumentSyncEngine<UserModel>? = DocumentSyncEngine(remote: remote, managerKey: "profile", persistence: nil, clock: clock)
        try await engine?.startListening(documentId: "ada")
        await clock.waitForSleepers(count: 1)
        let executor = try #require(engine?.core.queue)
        engine = nil
        await executor.run {}
        #expect(clock.sleeperCount == 0)
        #expect(remote.store.client.connectionObserverCount == 0)
    }

    @Test("an engine dropped while offline leaves nothing waiting for the connection", .timeLimit(.minutes(5)))
    func droppedWhileOffline() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        var engine: CollectionSyncEngine<Product>? = CollectionSyncEngine(remote: remote, managerKey: "products", persistence: nil, clock: clock)
        await engine?.startListening()
        remote.store.goOffline()
        try await engine?.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        #expect(clock.sleeperCount == 0, "offline, nothing backs off: the connection's return is the retry")
        let executor = try #require(engine?.core.queue)
        engine = nil
        await executor.run {}
        #expect(remote.store.client.connectionObserverCount == 0)
        let calls = remote.store.commitCount
        remote.store.goOnline()
        await remote.store.client.waitUntilConnected()
        #expect(remote.store.commitCount == calls)
        #expect(remote.store.listenerCount == 0)
    }

    @Test("a listening engine that is dropped detaches its listener", .timeLimit(.minutes(5)))
    func listeningEngineDropped() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        var engine: CollectionSyncEngine<Product>? = CollectionSyncEngine(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine?.startListening()
        #expect(engine?.currentCollection.count == 2)
        engine = nil
        #expect(await remote.store.waitForListeners(count: 0))
    }
}

@Suite("Listener switches")
struct ListenerSwitchTests {
    @Test("a batch of a stream already replaced by another query's is dropped, and its version is not kept")
    func staleBatchDropped() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine.startListening { $0.whereField("price", isLessThan: 100) }
        let old = try #require(engine.core.onOwner { $0.listener.attached })
        await engine.startListening { $0.whereField("price", isGreaterThan: 100) }
        let version = engine.core.onOwner { $0.listener.resumeVersion }
        let rug = Document(path: try DocumentPath("products/rug"), data: ["id": "rug", "name": "Rug", "price": 500, "stock": 1], version: 99)
        let stale = RemoteChangeBatch(isSnapshot: false, changes: [.upsert(rug)], version: 99)
        #expect(!engine.core.applyNow(stale, prepared: nil, attachment: engine.core.currentAttachment(attempt: old)))
        #expect(engine.getDocument(id: "rug") == nil)
        #expect(engine.core.onOwner { $0.listener.resumeVersion } == version)
        let current = try #require(engine.core.onOwner { $0.listener.attached })
        #expect(engine.core.applyNow(stale, prepared: nil, attachment: engine.core.currentAttachment(attempt: current)))
        #expect(engine.getDocument(id: "rug")?.price == 500)
    }
}

@Suite("Engines as services", .timeLimit(.minutes(5)))
struct EngineServiceTests {
    @Test("an engine run as a service listens while its task runs, and stops, keeping its cache, when the task is cancelled")
    func collectionEngineService() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        let running = Task { try await engine.run() }
        #expect(await engine.waitUntil { engine.currentCollection.count == 2 })
        #expect(await remote.store.waitForListeners(count: 1))
        try remote.simulateDelete(id: "desk")
        #expect(await engine.waitUntil { engine.currentCollection.map(\.id) == ["lamp"] })
        running.cancel()
        try await running.value
        #expect(await remote.store.waitForListeners(count: 0))
        #expect(engine.currentCollection.map(\.id) == ["lamp"], "the cache stays")
    }

    @Test("a document engine run as a service without a path now (signed out) waits instead of failing its group")
    func documentEngineServiceWithoutPath() async throws {
        let saved = try MockLocalDocumentPersistence(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: "users")
        let logger = RecordingDataSyncLogger()
        let engine = DocumentSyncEngine<UserModel>(remote: MockRemoteDocumentService(collectionPath: { nil }), managerKey: "user",
                                                   persistence: saved, logger: logger, clock: ManualClock())
        let running = Task { try await engine.run() }
        #expect(await logger.wait(forEventNamed: "user_listener_fail"))
        running.cancel()
        try await running.value
        #expect(engine.currentDocument?.name == "Ada", "the cache stays")
    }

    @Test("a document engine run as a service follows the document it listened to last")
    func documentEngineService() async throws {
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = DocumentSyncEngine<UserModel>(remote: remote, managerKey: "user", persistence: nil, clock: ManualClock())
        try await engine.startListening(documentId: "ada")
        engine.stopListening(clearCaches: false)
        let running = Task { try await engine.run() }
        try remote.simulateUpdate(UserModel(id: "ada", name: "Ada L.", visits: 1))
        #expect(await engine.waitUntil { engine.currentDocument?.name == "Ada L." })
        running.cancel()
        try await running.value
        #expect(await remote.store.waitForListeners(count: 0))
    }
}

@Suite("Cache and remote paths")
struct CachePathTests {
    @Test("a cache seeded under another collection than the remote's is reported, not silently hidden")
    func mismatchReported() throws {
        let logger = RecordingDataSyncLogger()
        let seeded = try MockLocalCollectionPersistence(collection: Product.mocks, collectionPath: "products")
        // The mock remote's default path is "mocks": the seeded products are not its documents.
        _ = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(), managerKey: "products", persistence: seeded, logger: logger)
        let event = try #require(logger.events(named: "products_persistence_mismatch").first)
        #expect(event.severity == .severe)
        #expect("\(event.parameters["error_description"] ?? "")".contains("collectionPath"))

        let quiet = RecordingDataSyncLogger()
        let matching = try MockLocalCollectionPersistence(collection: Product.mocks, collectionPath: "products")
        _ = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collectionPath: { "products" }), managerKey: "products", persistence: matching, logger: quiet)
        #expect(quiet.events(named: "products_persistence_mismatch").isEmpty)

        let documentLogger = RecordingDataSyncLogger()
        let profile = try MockLocalDocumentPersistence(document: Product.mocks[0], collectionPath: "products")
        _ = DocumentSyncEngine<Product>(remote: MockRemoteDocumentService(), managerKey: "lamp", persistence: profile, logger: documentLogger)
        #expect(!documentLogger.events(named: "lamp_persistence_mismatch").isEmpty)
    }
}

/// A stop asked for while a start is still on its way to the engine's executor: the stop comes
/// after it, so it wins, as the calls were made.
@Suite("Stop after start", .timeLimit(.minutes(5)))
struct StopAfterStartTests {
    @Test("a collection engine stopped while its start waits on the busy executor keeps no listener: not in the engine, not on the server")
    func collectionStopWins() async throws {
        guard #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, *) else { return }
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("products/lamp"), ["id": "lamp", "name": "Lamp", "price": 20, "stock": 1])])
        let engine = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collectionPath: { "products" }, store: server), managerKey: "products",
                                                   persistence: nil, clock: ManualClock())
        // The executor busy (a large batch being applied, say) while the start is queued on it.
        let gate = DispatchSemaphore(value: 0)
        engine.core.queue.enqueue { gate.wait() }
        // Runs until its step is queued, then waits for its first batch.
        let start = Task.immediate { await engine.startListening() }
        engine.stopListening()
        gate.signal()
        await start.value
        await engine.core.queue.run {}
        try #require(!engine.core.isListening, "the start queued before the stop ran after it")
        #expect(engine.core.query == nil)
        await server.settle()
        #expect(await server.waitForListeners(count: 0))
    }

    @Test("a document engine stopped while its start waits on the busy executor keeps no listener, and forgets the document")
    func documentStopWins() async throws {
        guard #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, *) else { return }
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("users/ada"), ["id": "ada", "name": "Ada", "visits": 0])])
        let engine = DocumentSyncEngine<UserModel>(remote: MockRemoteDocumentService(collectionPath: { "users" }, store: server), managerKey: "user",
                                                   persistence: nil, clock: ManualClock())
        let gate = DispatchSemaphore(value: 0)
        engine.core.queue.enqueue { gate.wait() }
        let start = Task.immediate { try await engine.startListening(documentId: "ada") }
        engine.stopListening()
        gate.signal()
        try await start.value
        await engine.core.queue.run {}
        try #require(!engine.core.isListening, "the start queued before the stop ran after it")
        #expect(engine.core.documentID == nil)
        #expect(engine.currentDocument == nil)
        await server.settle()
        #expect(await server.waitForListeners(count: 0))
    }
}
