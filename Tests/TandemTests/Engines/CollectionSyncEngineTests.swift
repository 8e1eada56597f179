import Foundation
import Observation
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

@Suite("CollectionSyncEngine", .timeLimit(.minutes(5)))
struct CollectionSyncEngineTests {
    func makeEngine(
        remote: MockRemoteCollectionService, persistence: (any LocalCollectionPersistence)? = nil,
        logger: RecordingDataSyncLogger = RecordingDataSyncLogger(), clock: ManualClock = ManualClock()
    ) -> CollectionSyncEngine<Product> {
        CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence, logger: logger, clock: clock)
    }

    @Test("startListening loads the collection, then streams changes from other clients")
    func loadAndStream() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote)
        #expect(engine.isFromCache)
        await engine.startListening()
        #expect(engine.currentCollection.map(\.id) == ["desk", "lamp"])
        #expect(!engine.isFromCache)
        try remote.simulateUpdate(Product(id: "chair", name: "Chair", price: 50, stock: 9))
        try remote.simulateDelete(id: "desk")
        #expect(await engine.waitUntil { engine.currentCollection.map(\.id) == ["chair", "lamp"] })
    }

    @Test("a write shows at once with pending writes, and clears when acknowledged")
    func latencyCompensation() async throws {
        let clock = ManualClock()
        let store = MockServer(clock: clock)
        let remote = MockRemoteCollectionService(collectionPath: { "products" }, store: store)
        let engine = makeEngine(remote: remote, clock: clock)
        await engine.startListening()
        store.setLatency(.seconds(1))
        let save = Task { try await engine.saveDocument(Product(id: "lamp", name: "Lamp", price: 30, stock: 3)) }
        await clock.waitForSleepers(count: 1)  // the commit is on its way
        #expect(engine.getDocument(id: "lamp")?.name == "Lamp")
        #expect(engine.metadata(id: "lamp").hasPendingWrites)
        // Every message from the server waits the latency in turn, and the listener's changes may
        // come before the acknowledgement: with no latency left, one step lets them all through
        // (two steps of a second would race the second message's sleep).
        store.setLatency(.zero)
        clock.advance(by: .seconds(1))
        try await save.value
        #expect(!engine.metadata(id: "lamp").hasPendingWrites)
        #expect(store.documents[try DocumentPath("products/lamp")]?.data["price"] == .double(30))
    }

    @Test("offline writes queue, then replay in order after the listener reconnects")
    func offlineReplay() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, logger: logger, clock: clock)
        await engine.startListening()
        remote.store.goOffline()
        try await engine.updateDocument(id: "lamp", data: ["stock": .increment(-1)])
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        try await engine.updateDocument(id: "rug", data: ["name": "Red rug"])  // merges into the queued save
        #expect(engine.pendingWrites.count == 2)
        #expect(engine.getDocument(id: "lamp")?.stock == 2)
        #expect(engine.getDocument(id: "rug")?.name == "Red rug")

        // Offline, neither the listener nor the sender backs off: they wait for the connection. (Each
        // write wakes both, so the listener may be trying to attach at this moment; it never sleeps.)
        #expect(clock.sleeperCount == 0)
        #expect(engine.core.isListening)

        remote.store.goOnline()
        // Both go as soon as it is back, with no time passing on the clock.
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(clock.sleeperCount == 0)
        #expect(logger.names.filter { $0.hasSuffix("_retrying") }.isEmpty)
        let documents = remote.store.documents
        #expect(documents[try DocumentPath("products/lamp")]?.data["stock"] == .int(2))
        #expect(documents[try DocumentPath("products/rug")]?.data["name"] == "Red rug")
        #expect(logger.names.contains("products_pendingWritesCleared"))
    }

    @Test("down with an attempt failed on it, a write is not sent: it asks the connection to try now, and the connection's return sends the outbox")
    func restsWhileDown() async throws {
        let remote = CountingRemote(MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" }))
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        remote.base.store.goOffline()
        // Nothing failed on the connection yet: the write is tried, and its caller hears it stays queued.
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        #expect(remote.counts.commits == 1)
        // Now each write is only queued (its caller hears so once it is durable) and wakes the connection.
        for stock in 3...5 {
            try await engine.updateDocument(id: "rug", data: ["stock": .value(.int(stock))])
        }
        #expect(engine.pendingWrites.count == 2, "the save was tried, so the updates queue behind it, merged into one")
        // Each write's wake runs in its own step, right after its caller was answered.
        await engine.core.queue.run {}
        #expect(remote.counts.commits == 1 && remote.counts.wakes == 3)
        remote.base.store.goOnline()
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(remote.base.store.documents[try DocumentPath("products/rug")]?.data["stock"] == .int(5))
    }

    @Test("a local write is shown once it is durable, never before: while its outbox entry is on its way to disk, readers see the engine as it was")
    func shownOnceDurable() async throws {
        let persistence = GatedPersistence()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence, clock: ManualClock())
        remote.store.goOffline()
        persistence.closeGate()
        let save = Task { try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2)) }
        var entered = persistence.entered.makeAsyncIterator()
        _ = await entered.next()
        // The engine's step is blocked in the disk write: the model is made, but not published.
        #expect(engine.getDocument(id: "rug") == nil && engine.pendingWrites.isEmpty)
        persistence.openGate()
        try await save.value
        #expect(engine.getDocument(id: "rug")?.name == "Rug" && engine.pendingWrites.count == 1)
    }

    @Test("large batches merge into the models and the SQLite cache, with pending writes kept on top")
    func largeBatches() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collectionPath: { "products" })
        let engine = makeEngine(remote: remote, persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
        func document(_ id: String, price: Double, version: Version) -> Document {
            Document(path: try! DocumentPath("products/\(id)"), data: ["name": .string(id), "price": .double(price), "stock": 1], version: version)
        }
        func id(_ prefix: String, _ index: Int) -> String { prefix + String(1000 + index).dropFirst() }

        // A first snapshot, then a pending write the remote has not seen.
        engine.core.applyNow(RemoteChangeBatch(isSnapshot: true, changes: (0..<200).map { .upsert(document(id("p", $0), price: 1, version: 1)) }, version: 1))
        #expect(engine.currentCollection.map(\.id) == (0..<200).map { id("p", $0) })
        remote.store.goOffline()
        try await engine.saveDocument(Product(id: "p010", name: "mine", price: 99, stock: 5))
        #expect(engine.pendingWrites.count == 1)

        // Updates, additions and removals in one batch of more than 64 changes.
        var changes: [RemoteChange] = (0..<50).map { .upsert(document(id("p", $0), price: 2, version: 2)) }
        changes += (0..<50).map { .upsert(document(id("q", $0), price: 3, version: 2)) }
        changes += (150..<170).map { .removal(try! DocumentPath("products/\(id("p", $0))"), version: 2) }
        engine.core.applyNow(RemoteChangeBatch(isSnapshot: false, changes: changes.shuffled(), version: 2))
        let expected = ((0..<150).map { id("p", $0) } + (170..<200).map { id("p", $0) } + (0..<50).map { id("q", $0) }).sorted()
        #expect(engine.currentCollection.map(\.id) == expected)
        #expect(engine.getDocument(id: "p020")?.price == 2)
        #expect(engine.getDocument(id: "p060")?.price == 1)
        #expect(engine.getDocument(id: "q049")?.price == 3)
        #expect(engine.getDocument(id: "p010")?.name == "mine")  // the pending write stays on top
        #expect(engine.metadata(id: "p010").hasPendingWrites)

        // A snapshot again: what it lacks goes, the pending write stays.
        engine.core.applyNow(RemoteChangeBatch(isSnapshot: true, changes: (0..<100).map { .upsert(document(id("p", $0), price: 4, version: 3)) }, version: 3))
        #expect(engine.currentCollection.map(\.id) == (0..<100).map { id("p", $0) })
        #expect(engine.getDocument(id: "p011")?.price == 4)
        #expect(engine.getDocument(id: "p010")?.name == "mine")

        // The cache holds the server's documents and the write, for the next launch.
        let relaunched = makeEngine(remote: remote, persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
        #expect(relaunched.currentCollection.map(\.id) == (0..<100).map { id("p", $0) })
        #expect(relaunched.getDocument(id: "p099")?.price == 4)
        #expect(relaunched.getDocument(id: "p010")?.name == "mine")
        #expect(relaunched.pendingWrites.count == 1)
    }

    @Test("an acknowledgement lost after the commit does not apply an increment twice")
    func exactlyOnce() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, clock: clock)
        await engine.startListening()
        remote.store.dropNextAcknowledgements(1)
        try await engine.updateDocument(id: "lamp", data: ["stock": .increment(5)])
        #expect(engine.hasPendingWrites, "the answer was lost, so the write stays queued")
        // The connection went with the answer; once it is back the write goes again, at once.
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(remote.store.documents[try DocumentPath("products/lamp")]?.data["stock"] == .int(8))
        #expect(remote.store.appliedWriteCount == 1)
        #expect(engine.getDocument(id: "lamp")?.stock == 8)
    }

    @Test("two ids Swift's strings call equal but whose bytes differ are two documents: both writes are kept, sent and applied, each to its own")
    func canonicallyEquivalentIDs() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "products" })
        let engine = makeEngine(remote: remote)
        await engine.startListening()
        try await engine.saveDocument(Product(id: "caf\u{E9}", name: "precomposed", price: 1, stock: 1))
        try await engine.saveDocument(Product(id: "cafe\u{301}", name: "decomposed", price: 2, stock: 2))
        #expect(engine.currentCollection.count == 2, "neither write hides the other while pending")
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(remote.store.documents.count == 2)
        #expect(remote.store.appliedWriteCount == 2)
        #expect(Set(engine.currentCollection.map(\.name)) == ["precomposed", "decomposed"])
        #expect(engine.getDocument(id: "cafe\u{301}")?.name == "decomposed")
        #expect(engine.getDocument(id: "caf\u{E9}")?.name == "precomposed")
    }

    @Test("a write refused for good is rolled back, thrown to the caller, logged and listed")
    func rejection() async throws {
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, logger: logger)
        await engine.startListening()
        remote.store.failNextCalls(1, with: TandemError(.permissionDenied, "No."))
        do {
            try await engine.updateDocument(id: "lamp", data: ["price": 1])
            Issue.record("expected permission-denied")
        } catch let error as TandemError {
            #expect(error.code == .permissionDenied)
        }
        #expect(engine.getDocument(id: "lamp")?.price == 30, "rolled back")
        #expect(!engine.hasPendingWrites)
        #expect(engine.rejectedWrites.map(\.error.code) == [.permissionDenied])
        #expect(logger.events(named: "products_update_fail").first?.severity == .severe)
        #expect(logger.names.contains("products_writeRejected"))
    }

    @Test("pending writes, rejections, isFromCache and metadata are observed, each woken only by its own changes")
    func observation() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote)
        let fromCache = ChangeCounter()
        withObservationTracking { _ = engine.isFromCache } onChange: { fromCache.fire() }
        await engine.startListening()
        #expect(fromCache.count == 1, "the first batch ends isFromCache")

        // A write: the badge and the document's metadata hear it; rejections do not.
        let pending = ChangeCounter(), metadata = ChangeCounter(), rejected = ChangeCounter(), cache = ChangeCounter()
        withObservationTracking { _ = engine.hasPendingWrites } onChange: { pending.fire() }
        withObservationTracking { _ = engine.metadata(id: "lamp") } onChange: { metadata.fire() }
        withObservationTracking { _ = engine.rejectedWrites } onChange: { rejected.fire() }
        withObservationTracking { _ = engine.isFromCache } onChange: { cache.fire() }
        try await engine.updateDocument(id: "lamp", data: ["stock": .increment(1)])
        #expect(pending.count == 1 && metadata.count == 1)
        #expect(rejected.count == 0 && cache.count == 0)

        // A refusal: the rejected list hears it.
        let refused = ChangeCounter()
        withObservationTracking { _ = engine.rejectedWrites } onChange: { refused.fire() }
        remote.store.failNextCalls(1, with: TandemError(.permissionDenied, "No."))
        await #expect(throws: TandemError.self) { try await engine.updateDocument(id: "lamp", data: ["price": 1]) }
        #expect(refused.count == 1)
        #expect(cache.count == 0)
        engine.stopListening(clearCaches: false)
    }

    @Test("listener failures retry after 2, 4, 8 s on the clock, and reset after a good batch")
    func retryBackoff() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, logger: logger, clock: clock)
        remote.store.failNextCalls(3)
        await engine.startListening()  // returns after the first failure, never hangs
        #expect(engine.currentCollection.isEmpty)
        for expected in [2.0, 4.0, 8.0] {
            // Logged before the retry's sleep starts.
            await clock.waitForSleepers(count: 1)
            #expect(logger.retryDelays("products_listener_retrying").count == Int(expected).trailingZeroBitCount)
            #expect(logger.retryDelays("products_listener_retrying").last == expected)
            clock.advance(by: .seconds(Int(expected)))
        }
        #expect(await engine.waitUntil { engine.currentCollection.count == 2 })
        // A lost connection is not a failure of the listener: it waits for the connection, no backoff.
        remote.store.goOffline()
        #expect(await logger.wait(forEventNamed: "products_connection_lost"))
        #expect(clock.sleeperCount == 0)
        #expect(logger.retryDelays("products_listener_retrying").count == 3)
        remote.store.goOnline()
        try remote.simulateUpdate(Product(id: "cup", name: "Cup", price: 4, stock: 9))
        #expect(await engine.waitUntil { engine.currentCollection.count == 3 })
        #expect(clock.sleeperCount == 0)
        engine.stopListening()
    }

    @Test("an engine's retries draw their jitter from the generator it is given: spread around the backoff, the same for the same seed")
    func retryJitter() async throws {
        let clock = ManualClock()
        let policy = RetryPolicy.exponential(jitter: 0.5)
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: clock,
                                                   retryPolicy: policy, random: SeededRandomNumberGenerator(seed: 7))
        var reference = SeededRandomNumberGenerator(seed: 7)
        remote.store.failNextCalls(4)
        await engine.startListening()
        var delays: [Duration] = []
        for failures in 1...4 {
            let expected = try #require(policy.delay(afterFailures: failures, using: &reference))
            let deadline = clock.now.advanced(by: expected)
            // The retry's sleep, whatever it is: a wrong delay fails here instead of waiting for ever.
            await clock.waitForSleepers(count: 1)
            #expect(clock.pendingDeadlines == [deadline], "after \(failures) failures")
            delays.append(expected)
            clock.advance(to: clock.pendingDeadlines.first ?? deadline)
        }
        // Within half of 2, 4, 8, 16 s either way, and not the plain backoff.
        for (delay, base) in zip(delays, [2.0, 4.0, 8.0, 16.0]) {
            #expect(abs(delay.doubleSeconds - base) <= base * 0.5)
        }
        #expect(delays.map(\.doubleSeconds) != [2, 4, 8, 16])
        engine.stopListening()
    }

    @Test("stopListening cancels a scheduled retry")
    func stopCancelsRetry() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, clock: clock)
        remote.store.failNextCalls(1)
        await engine.startListening()
        await clock.waitForSleepers(count: 1)
        engine.stopListening()
        // The stop runs on the engine's executor, after every call made before it.
        await engine.core.queue.run {}
        #expect(clock.sleeperCount == 0, "the retry's sleep was cancelled")
        clock.advance(by: .seconds(60))
        #expect(remote.store.listenerCount == 0)
        #expect(engine.currentCollection.isEmpty)
    }

    @Test("a read while the listener is down retries at once")
    func readWakesListener() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, clock: clock)
        remote.store.failNextCalls(1)
        await engine.startListening()
        await clock.waitForSleepers(count: 1)
        _ = try await engine.getCollectionAsync()
        #expect(await engine.waitUntil { engine.currentCollection.count == 2 }, "reconnected without advancing the clock")
        engine.stopListening()
    }

    @Test("the same query again while the listener backs off starts it at once")
    func sameQueryWakesBackoff() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote, clock: clock)
        remote.store.failNextCalls(1)
        await engine.startListening { $0.whereField("price", isLessThan: 100) }
        #expect(engine.currentCollection.isEmpty)
        await clock.waitForSleepers(count: 1)
        // The clock never moves: only the second start can bring the documents.
        await engine.startListening { $0.whereField("price", isLessThan: 100) }
        #expect(engine.currentCollection.map(\.id) == ["lamp"])
        engine.stopListening()
    }

    @Test("the same query is a no-op; a different one swaps the listener")
    func queries() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = makeEngine(remote: remote)
        await engine.startListening { $0.whereField("price", isLessThan: 100) }
        #expect(engine.currentCollection.map(\.id) == ["lamp"])
        await engine.startListening { $0.whereField("price", isLessThan: 100) }
        #expect(remote.store.listenerCount == 1)
        await engine.startListening { $0.whereField("price", isGreaterThan: 100) }
        #expect(engine.currentCollection.map(\.id) == ["desk"])
        #expect(await remote.store.waitForListeners(count: 1), "the first query's listener left when the second's came")
    }

    @Test("a nil collection path is a typed error, not a crash or a hang")
    func unavailablePath() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { nil })
        let engine = makeEngine(remote: remote)
        await #expect(throws: TandemError.self) { try await engine.saveDocument(Product.mocks[0]) }
        await engine.startListening()
        #expect(engine.currentCollection.isEmpty)
        engine.stopListening()
    }

    @Test("a new engine with the same key has the cache and the outbox before any network")
    func persistenceAcrossLaunches() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        do {
            let engine = makeEngine(remote: remote, persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
            await engine.startListening()
            remote.store.goOffline()
            try await engine.updateDocument(id: "desk", data: ["stock": .increment(2)])
            engine.stopListening(clearCaches: false)
        }
        let relaunched = makeEngine(remote: remote, persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
        #expect(relaunched.currentCollection.map(\.id) == ["desk", "lamp"])
        #expect(relaunched.getDocument(id: "desk")?.stock == 3)
        #expect(relaunched.pendingWrites.count == 1)
        remote.store.goOnline()
        await relaunched.startListening()
        #expect(await relaunched.waitUntil { !relaunched.hasPendingWrites })
        #expect(remote.store.documents[try DocumentPath("products/desk")]?.data["stock"] == .int(3))
    }
}

/// Counts the changes an observation heard.
final class ChangeCounter: Sendable {
    private let fired = Atomic<Int>(0)
    var count: Int { fired.load(ordering: .relaxed) }
    func fire() { fired.wrappingAdd(1, ordering: .relaxed) }
}

/// A remote that counts the write requests it is asked to send and the wakes of its connection.
private final class CountingRemote: RemoteCollectionService, Sendable {
    struct Counts { var commits = 0, wakes = 0 }
    let base: MockRemoteCollectionService
    private let counted = Mutex(Counts())
    var counts: Counts { counted.withLock { $0 } }

    init(_ base: MockRemoteCollectionService) { self.base = base }

    func collectionPath() throws -> CollectionPath { try base.collectionPath() }
    func getDocuments(query: Query) async throws -> [Document] { try await base.getDocuments(query: query) }
    func getDocument(id: String) async throws -> Document? { try await base.getDocument(id: id) }
    func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        base.listen(query: query, resumeFrom: resumeFrom)
    }
    func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        base.listenDocument(id: id, resumeFrom: resumeFrom)
    }
    func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await base.commit(mutations) }
    func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        counted.withLock { $0.commits += 1 }
        return await base.commit(requests: requests)
    }
    func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        base.observeConnection(handler)
    }
    func wakeConnection() {
        counted.withLock { $0.wakes += 1 }
        base.wakeConnection()
    }
}

/// A persistence whose outbox writes wait at a gate while it is closed, telling `entered` first.
private final class GatedPersistence: LocalCollectionPersistence, @unchecked Sendable {
    // Safe to mark unchecked: `base` is called by one engine step at a time; the rest are locks,
    // a semaphore and a stream.
    private let base = MockLocalCollectionPersistence()
    private let closed = Mutex(false)
    private let gate = DispatchSemaphore(value: 0)
    private let enteredPair = AsyncStream<Void>.makeStream()
    var entered: AsyncStream<Void> { enteredPair.stream }

    func closeGate() { closed.withLock { $0 = true } }

    func openGate() {
        closed.withLock { $0 = false }
        gate.signal()
    }

    func load() throws -> LocalCollectionState? { try base.load() }
    func create(clientID: String) throws -> LocalCollectionState { try base.create(clientID: clientID) }
    func apply(_ change: LocalCollectionChange) throws {
        if !change.outboxPuts.isEmpty, closed.withLock({ $0 }) {
            enteredPair.continuation.yield()
            gate.wait()
        }
        try base.apply(change)
    }
    func clear() throws { try base.clear() }
    func space(for user: String) throws -> any LocalCollectionPersistence { try base.space(for: user) }
    func lastUser() throws -> String? { try base.lastUser() }
    func setLastUser(_ user: String?) throws { try base.setLastUser(user) }
}
