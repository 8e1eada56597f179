import Foundation
import Logging
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

struct Review: SyncModel, Equatable {
    var id: String
    var rating: Int
}

@Suite("CollectionGroupSyncEngine and pass-through streams", .timeLimit(.minutes(5)))
struct CollectionGroupSyncEngineTests {
    func store() throws -> MockServer {
        MockServer(documents: [
            Document(path: try DocumentPath("products/p1/reviews/r1"), data: ["rating": 5]),
            Document(path: try DocumentPath("products/p2/reviews/r1"), data: ["rating": 2]),  // the same id, another parent
            Document(path: try DocumentPath("products/p2/reviews/r2"), data: ["rating": 4]),
            Document(path: try DocumentPath("shops/s1/reviews/r3"), data: ["rating": 3]),
            Document(path: try DocumentPath("products/p1/notes/n1"), data: ["rating": 5]),
        ])
    }

    @Test("a group query spans parents, and equal ids under different parents stay apart")
    func group() async throws {
        let store = try store()
        let remote = MockRemoteCollectionGroupService(groupName: "reviews", store: store)
        let engine = CollectionGroupSyncEngine<Review>(remote: remote, managerKey: "reviews", persistence: nil, clock: ManualClock())
        await engine.startListening()
        #expect(engine.currentCollection.count == 4)
        #expect(engine.currentDocuments.map(\.path.description) == [
            "products/p1/reviews/r1", "products/p2/reviews/r1", "products/p2/reviews/r2", "shops/s1/reviews/r3",
        ])
        await engine.startListening { $0.whereField("rating", isGreaterThanOrEqualTo: 4) }
        #expect(engine.currentCollection.map(\.rating) == [5, 4])
        store.simulateWrite(Document(path: try DocumentPath("shops/s9/reviews/r8"), data: ["rating": 5]))
        #expect(await engine.waitUntil { engine.currentCollection.count == 3 })
        let fetched = try await engine.getDocumentsAsync { $0.whereField("rating", isLessThan: 3) }
        #expect(fetched.map(\.rating) == [2])
    }

    @Test("streamCollection yields query-ordered snapshots without touching currentCollection")
    func streamCollection() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        var snapshots = engine.streamCollection { $0.order(by: "price", descending: true) }.makeAsyncIterator()
        #expect(try await snapshots.next()?.map(\.id) == ["desk", "lamp"])
        try remote.simulateUpdate(Product(id: "sofa", name: "Sofa", price: 900, stock: 1))
        #expect(try await snapshots.next()?.map(\.id) == ["sofa", "desk", "lamp"])
        #expect(engine.currentCollection.isEmpty, "pass-through streams never fill the engine's view")
    }

    @Test("streamCollectionUpdates splits updates and deletions; streamDocument follows one document")
    func updatesAndDeletions() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        let (updates, deletions) = engine.streamCollectionUpdates()
        var updateIterator = updates.makeAsyncIterator()
        var deletionIterator = deletions.makeAsyncIterator()
        var document = engine.streamDocument(id: "lamp").makeAsyncIterator()
        #expect(try await document.next()??.name == "Lamp")
        #expect(Set([try await updateIterator.next()?.id, try await updateIterator.next()?.id]) == ["desk", "lamp"])
        try remote.simulateDelete(id: "lamp")
        #expect(try await deletionIterator.next() == "lamp")
        #expect(try await document.next() == .some(nil))
    }

    @Test("a pass-through stream retries with backoff when it fails")
    func streamRetries() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, logger: logger, clock: clock)
        remote.store.failNextCalls(2)
        var snapshots = engine.streamCollection().makeAsyncIterator()
        let first = Task { try await snapshots.next() }
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(2))
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(4))
        #expect(try await first.value?.count == 2)
        #expect(logger.retryDelays("products_listener_retrying") == [2, 4])
    }
}

@Suite("Engine details", .timeLimit(.minutes(5)))
struct EngineDetailTests {
    @Test("the group engine's listener backs off 2, 4 s on the clock too")
    func groupBackoff() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let store = MockServer(documents: [Document(path: try DocumentPath("a/1/reviews/r"), data: ["rating": 1])])
        let engine = CollectionGroupSyncEngine<Review>(
            remote: MockRemoteCollectionGroupService(groupName: "reviews", store: store), managerKey: "reviews",
            persistence: nil, logger: logger, clock: clock)
        store.failNextCalls(2)
        await engine.startListening()
        #expect(logger.names.contains("reviews_bulkLoad_fail"))
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(2))
        await clock.waitForSleepers(count: 1)
        #expect(logger.retryDelays("reviews_listener_retrying") == [2, 4])
        clock.advance(by: .seconds(4))
        #expect(await engine.waitUntil { engine.currentCollection.count == 1 })
        engine.stopListening()
    }

    @Test("an acknowledgement never clears fields it did not send")
    func acknowledgementKeepsLaterFields() throws {
        let path = try DocumentPath("items/a")
        let base = Document(path: path, data: ["x": 0, "y": 0], version: 1)
        var view = LocalView(base: [base], outbox: Outbox(clientID: "c"), now: Date())
        let first = view.enqueue(.update(path, fields: ["x": 1]), now: Date()).entry
        view.markAttempted(first: 1)  // sent, so the next write is not merged into it
        _ = view.enqueue(.update(path, fields: ["y": 2]), now: Date())
        // The server applied only the first write.
        view.acknowledge(first, result: Document(path: path, data: ["x": 1, "y": 0], version: 2), version: 2, now: Date())
        #expect(view.documents[path]?.data == ["x": 1, "y": 2], "the queued y survives the acknowledgement of x")
        #expect(view.hasPendingWrites(path))
    }

    @Test("a cache write that fails is logged as a severe persist_fail, and the engine goes on in memory")
    func persistFailure() async throws {
        let persistence = MockLocalCollectionPersistence()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence, logger: logger, clock: ManualClock())
        persistence.failNextApplies(1)
        await engine.startListening()
        #expect(engine.currentCollection.map(\.id) == ["desk", "lamp"])
        let failures = logger.events(named: "products_persist_fail")
        #expect(failures.count == 1 && failures.first?.severity == .severe)
        #expect((failures.first?.parameters["error_description"] as? String)?.contains("injected failure") == true)
        #expect(persistence.appliedChanges.isEmpty)
        engine.stopListening()
    }

    @Test("cache writes hold no lock readers take: a reader never waits on disk")
    func diskOutsideReaderLock() async throws {
        let persistence = MockLocalCollectionPersistence()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence, clock: ManualClock())
        // While each change is written (a snapshot, a local write, its acknowledgement), the lock
        // that readers take must be free.
        let readable = Locked<[Bool]>([])
        persistence.whenApplying { _ in
            // Another thread may hold the lock for an instant (a reader, the listener's task); the
            // writer holding it across the disk write would keep it for the whole apply. So the
            // lock counts as free when it is had within a bounded number of tries, made here,
            // inside the apply.
            var free = false
            for _ in 0..<100_000 where !free {
                free = engine.core.published.withLockIfAvailable { _ in true } ?? false
            }
            readable.withLock { $0.append(free) }
        }
        await engine.startListening()
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 1, stock: 1))
        // The acknowledgement's cache write may come after the save returns: await it.
        #expect(await readable.wait { $0.count >= 3 }, "the snapshot, the write and its acknowledgement each wrote to disk")
        let seen = readable.value
        #expect(seen.allSatisfy { $0 }, "\(seen)")
        engine.stopListening()
    }

    @Test("a document that no longer decodes is logged as decode_fail with its id, never dropped silently")
    func decodeFailure() async throws {
        let collection = try CollectionPath("products")
        let store = MockServer(documents: [
            Document(path: try collection.document("desk"), data: ["id": "desk", "name": "Desk", "price": 10, "stock": 1]),
            Document(path: try collection.document("odd"), data: ["id": "odd", "name": "Odd", "price": "not a number", "stock": 1]),
        ])
        let remote = MockRemoteCollectionService(collectionPath: { "products" }, store: store)
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, logger: logger, clock: ManualClock())
        await engine.startListening()
        #expect(engine.currentCollection.map(\.id) == ["desk"])
        let failures = logger.events(named: "products_decode_fail")
        #expect(failures.count == 1 && failures.first?.severity == .severe)
        #expect(failures.first?.parameters["document_id"] as? String == "odd")
        // A local write that makes a document undecodable is logged as well.
        try await engine.updateDocument(id: "desk", data: ["price": "free"])
        #expect(engine.currentCollection.isEmpty)
        #expect(logger.events(named: "products_decode_fail").contains { $0.parameters["document_id"] as? String == "desk" })
        engine.stopListening()
    }

    @Test("mock persistences seed an engine before any network, and saves carry the model's event parameters")
    func mocks() async throws {
        let persistence = try MockLocalCollectionPersistence(collection: Product.mocks, collectionPath: "products")
        let remote = MockRemoteCollectionService(collectionPath: { "products" })
        remote.store.goOffline()
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence, logger: logger, clock: ManualClock())
        #expect(engine.currentCollection.map(\.id) == ["desk", "lamp"])
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 1, stock: 1))
        #expect(persistence.appliedChanges.contains { !$0.outboxPuts.isEmpty })
        #expect(logger.events(named: "products_save_start").first?.parameters["id"] as? String == "rug")
    }
}

@Suite("swift-log bridge")
struct SwiftLogBridgeTests {
    @Test("events become log records at their severity, with parameters as metadata")
    func bridge() {
        let handler = CapturingLogHandler()
        let logger = SwiftLogDataSyncLogger(Logger(label: "sync", factory: { _ in handler }))
        logger.trackEvent(DataSyncLogEvent(name: "products_save_fail", parameters: ["document_id": "a"], severity: .severe))
        logger.trackEvent(DataSyncLogEvent(name: "products_save_start"))
        let records = handler.records
        #expect(records.map(\.level) == [.error, .info])
        #expect(records.first?.message == "products_save_fail")
        #expect(records.first?.metadata["document_id"] == "a")
    }
}

@Suite("Local view echoes")
struct LocalViewEchoTests {
    let path = try! DocumentPath("counters/a")

    func change(_ n: Int, _ version: Version, _ id: MutationID?) -> RemoteChangeBatch {
        RemoteChangeBatch(isSnapshot: false, changes: [
            RemoteChange(path: path, document: Document(path: path, data: ["n": .int(n)], version: version), version: version, mutationID: id),
        ], version: version)
    }

    @Test("the echo of our own write before its acknowledgement is not applied twice")
    func echoBeforeAcknowledgement() throws {
        var view = LocalView(base: [Document(path: path, data: ["n": 0], version: 1)], outbox: Outbox(clientID: "me"), now: Date())
        let first = view.enqueue(.update(path, fields: [:], transforms: [.init("n", .increment(1))]), now: Date()).entry
        let second = view.enqueue(.update(path, fields: [:], transforms: [.init("n", .increment(1))]), now: Date()).entry
        #expect(view.documents[path]?.data["n"] == 2)
        #expect(view.applyRemote(change(1, 2, first.id), now: Date()).isEmpty, "our own echo changes nothing")
        #expect(view.documents[path]?.data["n"] == 2)
        // A rebuild for any reason must not count the confirmed write twice.
        view.recompute(path, now: Date())
        #expect(view.documents[path]?.data["n"] == 2)
        view.acknowledge(first, result: Document(path: path, data: ["n": 1], version: 2), version: 2, now: Date())
        #expect(view.documents[path]?.data["n"] == 2)
        _ = view.applyRemote(change(2, 3, second.id), now: Date())
        view.acknowledge(second, result: Document(path: path, data: ["n": 2], version: 3), version: 3, now: Date())
        #expect(view.documents[path]?.data["n"] == 2)
        #expect(!view.hasPendingWrites(path))
    }

    @Test("a foreign change between our write and its echo is kept")
    func foreignChangeInterleaved() throws {
        var view = LocalView(base: [Document(path: path, data: ["n": 0], version: 1)], outbox: Outbox(clientID: "me"), now: Date())
        let mine = view.enqueue(.update(path, fields: [:], transforms: [.init("n", .increment(1))]), now: Date()).entry
        _ = view.applyRemote(change(10, 2, MutationID(clientID: "other", sequence: 1)), now: Date())
        #expect(view.documents[path]?.data["n"] == 11)
        _ = view.applyRemote(change(11, 3, mine.id), now: Date())
        #expect(view.documents[path]?.data["n"] == 11)
        view.acknowledge(mine, result: Document(path: path, data: ["n": 11], version: 3), version: 3, now: Date())
        #expect(view.documents[path]?.data["n"] == 11)
    }
}
