import Foundation
import Testing
@_spi(Testing) import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// Engines over a server in this process: the real client, sessions, fan-out and store, no port.
@Suite("In-process server", .timeLimit(.minutes(5)))
struct InProcessTests {
    final class Running: Sendable {
        let client: TandemClient
        private let task: Task<Void, any Error>
        init(_ server: InProcessServer, id: String) {
            var configuration = TandemClientConfiguration()
            configuration.clientID = id
            configuration.logger.logLevel = .critical
            client = TandemClient.inProcess(server, configuration: configuration)
            let client = client
            task = Task { try await client.run() }
        }
        func stop() async {
            task.cancel()
            _ = try? await task.value
        }
    }

    func engine(_ client: TandemClient, key: String) -> CollectionSyncEngine<Note> {
        CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: client, collection: collectionPath("notes")), managerKey: key, persistence: nil)
    }

    @Test("two engines on one in-process server see each other's writes; a batch is one commit, one version")
    func twoEngines() async throws {
        let listeners = Locked(0)
        var configuration = SyncServerConfiguration()
        configuration.onListenerCountChange = { count in listeners.value = count }
        let store = MemoryServerStore()
        let server = InProcessServer(store: store, configuration: configuration)
        let a = Running(server, id: "a"), b = Running(server, id: "b")
        await a.client.waitUntilConnected()
        await b.client.waitUntilConnected()
        let engineA = engine(a.client, key: "a"), engineB = engine(b.client, key: "b")
        await engineA.startListening()
        await engineB.startListening()
        #expect(await listeners.wait { $0 == 2 })

        try await engineA.commit { batch in
            batch.save(Note(id: "1", text: "one"))
            batch.save(Note(id: "2", text: "two"))
            batch.save(Note(id: "3", text: "three"))
        }
        #expect(await engineB.waitUntil { engineB.currentCollection.count == 3 })
        #expect(try await store.currentVersion() == 1, "one commit, one version")
        try await engineB.updateDocument(id: "2", data: ["n": .increment(4)])
        #expect(await engineA.waitUntil { engineA.getDocument(id: "2")?.n == 4 })

        await a.stop()
        await b.stop()
        #expect(await listeners.wait { $0 == 0 }, "each client's session ended with it, and its listener")
    }

    @Test("an acknowledgement lost with the connection: the write is sent again and applied once")
    func lostAcknowledgement() async throws {
        let store = MemoryServerStore()
        _ = try await store.commit([.set(documentPath("notes/c"), ["id": "c", "text": "counter", "n": 0])])
        let server = InProcessServer(store: store)
        let a = Running(server, id: "a")
        await a.client.waitUntilConnected()
        let counter = engine(a.client, key: "counter")
        await counter.startListening()
        a.client.dropConnection(afterAcknowledgements: 0)
        try await counter.updateDocument(id: "c", data: ["n": .increment(1)])
        #expect(await counter.waitUntil { !counter.hasPendingWrites })
        #expect(a.client.connectionAttempts >= 2, "the connection was dropped and made again")
        #expect(try await store.read(.document(documentPath("notes/c"))).documents.first?.data["n"] == 1)
        #expect(await counter.waitUntil { counter.getDocument(id: "c")?.n == 1 })
        await a.stop()
    }
}
