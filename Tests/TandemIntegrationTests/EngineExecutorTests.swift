import Dispatch
import Foundation
import Synchronization
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// An engine's disk work runs on its own executor: while one engine is stuck writing a large
/// snapshot, the connection it shares with other engines keeps being read, and an app's calls
/// return at once.
@Suite("Engine executor", .timeLimit(.minutes(5)))
struct EngineExecutorTests {
    /// A collection persistence whose write of a large batch blocks until released, telling when
    /// it started.
    final class StuckPersistence: Sendable {
        let persistence = MockLocalCollectionPersistence()
        let release = DispatchSemaphore(value: 0)
        let started: AsyncStream<Void>
        private let startedContinuation: AsyncStream<Void>.Continuation
        private let released = Atomic<Bool>(false)
        var isReleased: Bool { released.load(ordering: .acquiring) }

        init() {
            (started, startedContinuation) = AsyncStream<Void>.makeStream()
            persistence.whenApplying { [unowned self] change in
                guard change.upserts.count > 64, !isReleased else { return }
                startedContinuation.yield()
                release.wait()
            }
        }

        func waitUntilStuck() async {
            for await _ in started { return }
        }

        func unstick() {
            released.store(true, ordering: .releasing)
            release.signal()
        }
    }

    @Test("one engine persisting a large snapshot stalls nothing else: the shared connection drops and comes back, another engine's write is acknowledged and its listener updates, and stopListening returns, all while the disk write is held")
    func largeSnapshotStallsNoOne() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        _ = try await server.store.commit((0..<100).map { index in .set(documentPath("big/\(index)"), ["id": .string("\(index)"), "text": "big", "n": .int(index)]) })
        let running = RunningClient(server, id: "shared")
        let stuck = StuckPersistence()
        let big = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("big")),
                                             managerKey: "big", persistence: stuck.persistence)
        let small = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("small")),
                                               managerKey: "small", persistence: nil)
        await running.client.waitUntilConnected()
        let listening = Task { await big.startListening() }
        await stuck.waitUntilStuck()

        // The connection goes and comes back: the reader tells every engine, the stuck one too.
        running.client.setOnline(false)
        running.client.setOnline(true)
        await small.startListening()
        try await small.saveDocument(Note(id: "s1", text: "small"))
        #expect(await small.waitUntil { !small.hasPendingWrites && small.currentCollection.map(\.id) == ["s1"] })
        #expect(small.rejectedWrites.isEmpty)
        #expect(try await server.store.document(at: documentPath("small/s1"))?.data["text"] == "small")
        // An app's synchronous call on the stuck engine returns.
        big.stopListening(clearCaches: false)
        #expect(!stuck.isReleased, "all of the above happened while the snapshot's write was held")

        stuck.unstick()
        await listening.value
        await running.stop()
        await server.stop()
    }
}
