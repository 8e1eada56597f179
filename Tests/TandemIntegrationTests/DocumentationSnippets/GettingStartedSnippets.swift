import Foundation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The getting-started article's code, run against a real server: the app's engine writes, a
/// second engine (another device) hears it, and a write made offline lands once back online.
@Suite("Getting started article", .timeLimit(.minutes(5)))
struct GettingStartedSnippets {
    // snippet: getting-started-model
    struct Todo: SyncModel {
        let id: String
        var title: String
        var done = false
    }
    // end snippet

    @Test("the article's app writes, another device hears it, and an offline write lands once")
    func app() async throws {
        let server = try await LiveServer.start()
        let storage = FileManager.default.temporaryDirectory.appendingPathComponent("getting-started-\(UUID().uuidString)")
        let serverURL = server.url
        // snippet: getting-started-engine
        let client = TandemClient(url: serverURL)
        let todos = CollectionSyncEngine<Todo>(
            remote: TandemRemoteCollectionService(client: client, collection: try CollectionPath("todos")),
            managerKey: "todos",
            persistence: try SQLiteCollectionPersistence(managerKey: "todos", directory: storage))
        // end snippet
        let otherStorage = storage.appendingPathComponent("other-device")
        let otherClient = TandemClient(url: serverURL)
        let otherDevice = CollectionSyncEngine<Todo>(
            remote: TandemRemoteCollectionService(client: otherClient, collection: try CollectionPath("todos")),
            managerKey: "todos", persistence: try SQLiteCollectionPersistence(managerKey: "todos", directory: otherStorage))

        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await otherClient.run() }
            await otherDevice.startListening()
            // snippet: getting-started-run
            group.addTask { try await client.run() }      // keeps the connection up while the app runs
            await todos.startListening()                  // the cached answer at once, then the server's
            try await todos.saveDocument(Todo(id: "milk", title: "Buy milk"))
            try await todos.updateDocument(id: "milk", data: ["done": true])
            print(todos.currentCollection)                // [Todo(id: "milk", title: "Buy milk", done: true)]
            // end snippet
            #expect(todos.currentCollection.map(\.done) == [true])
            #expect(await otherDevice.waitUntil { otherDevice.getDocument(id: "milk")?.done == true })

            // snippet: getting-started-offline
            client.setOnline(false)                       // as on a plane
            try await todos.saveDocument(Todo(id: "eggs", title: "Buy eggs"))
            let queued = todos.metadata(id: "eggs").hasPendingWrites   // true: shown, and queued on disk
            client.setOnline(true)                        // sent once, with its mutation id
            // end snippet
            #expect(queued)
            #expect(await otherDevice.waitUntil { otherDevice.getDocument(id: "eggs") != nil })
            #expect(await todos.waitUntil { !todos.hasPendingWrites })
            #expect(todos.rejectedWrites.isEmpty)

            // snippet: getting-started-snapshots
            for await snapshot in todos.snapshots() {
                for change in snapshot.documentChanges {
                    print(change.kind, change.document.title)   // added Buy eggs, added Buy milk (by id), …
                }
                if !snapshot.metadata.hasPendingWrites { break }
            }
            // end snippet
            group.cancelAll()
        }
        let stored = try await server.store.read(.collection(try CollectionPath("todos"), Query()))
        #expect(stored.documents.map(\.path.description) == ["todos/eggs", "todos/milk"])
        #expect(stored.documents.map(\.version.rawValue).max() == 3, "three writes, each applied once")
        await server.stop()
        try? FileManager.default.removeItem(at: storage)
    }
}
