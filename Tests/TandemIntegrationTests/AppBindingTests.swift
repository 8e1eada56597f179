import Foundation
import Observation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// What a SwiftUI app binds to without bridging code: the client's observable status, snapshots
/// that cannot fail, dismissable refusals, group documents identified by path, options in one value.
@Suite("App binding", .timeLimit(.minutes(5)))
struct AppBindingTests {
    @Test("TandemClient.status is observable: connected, then offline when taken offline, then connected again, and says who is signed in")
    func clientStatus() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let running = RunningClient(server, id: "status")
        let client = running.client
        await client.waitUntilConnected()
        #expect(client.status == ClientStatus(connection: .connected, auth: .signedOut))
        let heard = Locked(0)
        withObservationTracking { _ = client.status } onChange: { heard.withLock { $0 += 1 } }
        client.setOnline(false)
        #expect(await heard.wait { $0 == 1 }, "observers hear the connection go")
        #expect(client.status.connection == .offline)
        withObservationTracking { _ = client.status } onChange: { heard.withLock { $0 += 1 } }
        client.setOnline(true)
        #expect(await heard.wait { $0 == 2 }, "and come back")
        await client.waitUntilConnected()
        #expect(client.status.connection == .connected)
        #expect("\(client.status)" == "connected, signed out")
        await running.stop()
        await server.stop()
    }

    @Test("an engine's snapshots cannot fail (for await, no try); rejected writes can be dismissed one by one or all at once")
    func snapshotsAndRejections() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let running = RunningClient(server, id: "rejections")
        var options = EngineConfiguration()
        options.changeDelivery = .immediate
        let notes = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes")),
                                               managerKey: "notes", persistence: nil, configuration: options)
        await notes.startListening()
        for await snapshot in notes.snapshots() {
            #expect(snapshot.documents.isEmpty)
            break
        }
        let huge = String(repeating: "x", count: 2 << 20)
        try? await notes.saveDocument(Note(id: "a", text: huge))
        try? await notes.saveDocument(Note(id: "b", text: huge))
        #expect(await notes.waitUntil { notes.rejectedWrites.count == 2 })
        notes.dismissRejectedWrite(notes.rejectedWrites[0])
        #expect(notes.rejectedWrites.map(\.mutation.path.id) == ["b"])
        notes.clearRejectedWrites()
        #expect(notes.rejectedWrites.isEmpty)
        await running.stop()
        await server.stop()
    }

    @Test("a collection group's documents are identified by their full path: two with one id under different parents are two elements")
    func groupDocumentsByPath() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        _ = try await server.store.commit([
            .set(documentPath("rooms/a/notes/same"), ["id": "same", "text": "in a", "n": 1]),
            .set(documentPath("rooms/b/notes/same"), ["id": "same", "text": "in b", "n": 2]),
        ])
        let running = RunningClient(server, id: "group")
        await running.client.waitUntilConnected()
        let notes = CollectionGroupSyncEngine<Note>(remote: TandemRemoteCollectionGroupService(client: running.client, groupName: "notes"),
                                                    managerKey: "group-notes", persistence: nil)
        await notes.startListening()
        #expect(await notes.waitUntil { notes.currentDocuments.count == 2 })
        #expect(Set(notes.currentDocuments.map(\.id)) == [documentPath("rooms/a/notes/same"), documentPath("rooms/b/notes/same")])
        #expect(Set(notes.currentCollection.map(\.id)) == ["same"], "the models' own ids collide")
        await running.stop()
        await server.stop()
    }
}
