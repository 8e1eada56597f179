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
}
