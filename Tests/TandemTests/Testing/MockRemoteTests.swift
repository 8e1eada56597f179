import Testing
import Tandem
import TandemCore
import TandemTesting

@Suite("Mock remotes")
struct MockRemoteTests {
    struct Item: SyncModel, Equatable {
        var id: String
        var n: Int
    }

    @Test("a listener stopped right after it starts, or after its first batch, leaves no registration behind")
    func cancelledListenerLeavesNothing() async throws {
        let remote = MockRemoteCollectionService(collection: [Item(id: "a", n: 1)], collectionPath: { "items" })
        for _ in 0..<200 {
            for try await _ in remote.listen(query: Query(), resumeFrom: nil) { break }
        }
        #expect(await remote.store.waitForListeners(count: 0))
        // Stopped before the store has set the listener up: it must not register afterwards.
        for _ in 0..<200 {
            let stream = remote.listen(query: Query(), resumeFrom: nil)
            let consumer = Task { for try await _ in stream {} }
            consumer.cancel()
            _ = await consumer.result
        }
        await remote.store.settle()
        #expect(await remote.store.waitForListeners(count: 0))
    }

    @Test("two engines seeded with mock persistences on one mock server write side by side: each mock has a writer id of its own")
    func seededMocksShareAServer() async throws {
        let server = MockServer()
        let first = CollectionSyncEngine<Item>(
            remote: MockRemoteCollectionService(collectionPath: { "a" }, store: server), managerKey: "a",
            persistence: try MockLocalCollectionPersistence(collection: [Item(id: "1", n: 1)], collectionPath: "a"))
        let second = CollectionSyncEngine<Item>(
            remote: MockRemoteCollectionService(collectionPath: { "b" }, store: server), managerKey: "b",
            persistence: try MockLocalCollectionPersistence(collection: [Item(id: "1", n: 1)], collectionPath: "b"))
        try await first.saveDocument(Item(id: "2", n: 2))
        try await second.saveDocument(Item(id: "2", n: 2))
        #expect(first.rejectedWrites.isEmpty && second.rejectedWrites.isEmpty, "\(first.rejectedWrites) \(second.rejectedWrites)")
        #expect(!first.hasPendingWrites && !second.hasPendingWrites)
    }
}
