import Foundation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// Writes whose messages would be larger than the server takes: the engine's windows are bounded by
/// bytes, so a large queue drains in order; a message over the limit is still answered, by its id.
@Suite("Large writes", .timeLimit(.minutes(5)))
struct LargeWritesTests {
    @Test("an outbox of 400 writes of 40 KB (16 MB) drains once online: no window is over the server's message limit, none refused")
    func largeOutboxDrains() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let running = RunningClient(server, id: "large")
        let notes = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes")),
                                               managerKey: "large", persistence: nil)
        await running.client.waitUntilConnected()
        running.client.setOnline(false)
        let text = String(repeating: "x", count: 40_000)
        for index in 0..<400 {
            try await notes.saveDocument(Note(id: String(format: "%03d", index), text: text, n: index))
        }
        #expect(notes.pendingWrites.count == 400)
        running.client.setOnline(true)
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(notes.rejectedWrites.isEmpty, "\(notes.rejectedWrites.count) refused: \(notes.rejectedWrites.first?.error.message ?? "")")
        let stored = try await server.store.read(.collection(collectionPath("notes"), Query())).documents
        #expect(stored.count == 400 && stored.allSatisfy { $0.data["text"] == .string(text) })
        await running.stop()
        await server.stop()
    }

    @Test("a write request over the message limit is answered by its id (refused, resource-exhausted), never left waiting; the one behind it applies")
    func oversizedRequestIsAnswered() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumRequestBytes = 1 << 20
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let running = RunningClient(server, id: "oversized")
        await running.client.waitUntilConnected()
        let big = (0..<40).map { index in Mutation.set(documentPath("big/\(index)"), ["text": .string(String(repeating: "y", count: 40_000))]) }
        let answers = await running.client.commit(requests: [
            WriteRequest(big, isAtomic: false),
            WriteRequest([Mutation.set(documentPath("small/1"), ["n": 1])], isAtomic: true),
        ])
        guard case .failure(let error as TandemError) = answers[0] else { Issue.record("expected the large request refused: \(answers[0])"); return }
        #expect(error.code == .resourceExhausted && error.message.contains("bytes"), "\(error)")
        guard case .success(let acknowledgements) = answers[1] else { Issue.record("expected the small request applied: \(answers[1])"); return }
        #expect(acknowledgements.map(\.status) == [.applied])
        #expect(try await server.store.document(at: documentPath("big/0")) == nil)
        await running.stop()
        await server.stop()
    }
}
