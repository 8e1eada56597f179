import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// Atomic batches: shown at once, queued in one durable step, sent as one request, applied or
/// refused whole.
@Suite("Engine batches")
struct BatchTests {
    func engine(_ remote: MockRemoteCollectionService, persistence: (any LocalCollectionPersistence)?) -> CollectionSyncEngine<Product> {
        CollectionSyncEngine<Product>(remote: remote, managerKey: "batches", persistence: persistence, clock: ManualClock())
    }

    @Test("offline, a batch shows at once and is queued durably as one batch; after a restart it is sent as one request")
    func queuedThenSent() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        // The engine before the restart, gone before the server is back.
        do {
            let offline = engine(remote, persistence: try SQLiteCollectionPersistence(managerKey: "batches", directory: directory.url))
            await offline.startListening()
            remote.store.goOffline()
            try await offline.commit { batch in
                batch.save(Product(id: "cup", name: "Cup", price: 5, stock: 9))
                batch.update(id: "lamp", data: ["stock": .increment(-1)])
                batch.delete(id: "desk")
        }
        #expect(offline.currentCollection.map(\.id) == ["cup", "lamp"])
        #expect(offline.getDocument(id: "lamp")?.stock == 2)
        #expect(offline.pendingWrites.count == 3)
        let batchTags = Set(offline.pendingWrites.map(\.batch))
        #expect(batchTags.count == 1 && batchTags.first! != nil)
        let saved = try #require(try SQLiteCollectionPersistence(managerKey: "batches", directory: directory.url).load())
        #expect(saved.outbox.entries.map(\.batch) == offline.pendingWrites.map(\.batch))
        // A later write never merges into the batch.
        try await offline.updateDocument(id: "cup", data: ["stock": 1])
        #expect(offline.pendingWrites.count == 4)
        offline.stopListening(clearCaches: false)
        }

        remote.store.goOnline()
        let commitsBefore = remote.store.commitCount
        let restarted = engine(remote, persistence: try SQLiteCollectionPersistence(managerKey: "batches", directory: directory.url))
        #expect(restarted.pendingWrites.count == 4)
        // Sent in order after the batch and the update: when this one is answered, so are they.
        try await restarted.saveDocument(Product(id: "jug", name: "Jug", price: 7, stock: 1))
        #expect(!restarted.hasPendingWrites)
        // The batch alone, then the update and the save together: the save's own step sends the
        // outbox's front once the save is in it.
        #expect(remote.store.commitCount - commitsBefore == 2)
        let documents = remote.store.documents
        #expect(documents[try DocumentPath("products/cup")]?.data["stock"] == 1)
        #expect(documents[try DocumentPath("products/lamp")]?.data["stock"] == 2)
        #expect(documents[try DocumentPath("products/desk")] == nil)
    }

    @Test("a batch the server refuses is rolled back whole: nothing of it is written, every write is listed")
    func refusedWhole() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = engine(remote, persistence: nil)
        await engine.startListening()
        await #expect(throws: TandemError.self) {
            try await engine.commit { batch in
                batch.save(Product(id: "cup", name: "Cup", price: 5, stock: 9))
                batch.update(id: "missing", data: ["stock": 1])  // not found on the server
                batch.delete(id: "lamp")
            }
        }
        #expect(engine.currentCollection.map(\.id) == ["desk", "lamp"])
        #expect(!engine.hasPendingWrites)
        #expect(engine.rejectedWrites.count == 3)
        let documents = remote.store.documents
        #expect(documents[try DocumentPath("products/cup")] == nil)
        #expect(documents[try DocumentPath("products/lamp")] != nil)
    }

    @Test("a batch that cannot be made writes nothing; an empty one does nothing; more than 500 is refused up front")
    func badBatches() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = engine(remote, persistence: nil)
        await engine.startListening()
        let commits = remote.store.commitCount
        await #expect(throws: TandemError.self) {
            try await engine.commit { batch in
                batch.save(Product(id: "cup", name: "Cup", price: 5, stock: 9))
                batch.delete(id: "bad/id")
            }
        }
        try await engine.commit { _ in }
        let tooMany = await #expect(throws: TandemError.self) {
            try await engine.commit { batch in
                for index in 0...500 { batch.delete(id: "d\(index)") }
            }
        }
        #expect(tooMany?.code == .invalidArgument)
        #expect(engine.getDocument(id: "cup") == nil)
        #expect(!engine.hasPendingWrites)
        #expect(remote.store.commitCount == commits)
    }

    @Test("the outbox keeps a batch's writes together, apart from the writes around them")
    func outboxRequests() throws {
        var outbox = Outbox(clientID: "c")
        let lamp = try DocumentPath("products/lamp")
        outbox.enqueue(.update(lamp, fields: ["a": 1]))
        let batch = outbox.enqueue(batch: [.update(lamp, fields: ["b": 1]), .delete(try DocumentPath("products/desk"))])
        outbox.enqueue(.update(lamp, fields: ["c": 1]))
        #expect(outbox.count == 4)
        #expect(batch.map(\.batch) == [2, 2])
        #expect(outbox.request(startingAt: 0).map(\.id.sequence) == [1])
        #expect(outbox.request(startingAt: 1).map(\.id.sequence) == [2, 3])
        #expect(outbox.request(startingAt: 3).map(\.id.sequence) == [4])
        #expect(outbox.request(startingAt: 4).isEmpty)
    }
}
