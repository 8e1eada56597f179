import Foundation
import IdentifiedCollections
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The README's synced-state example, run as written against a real server: the README's block is
/// read and each of its lines must be in ``ReadmeSyncedTests/example(client:directory:)`` below
/// (the cache's directory aside, which a test keeps in a temporary one).
enum ReadmeSyncedExample {
    struct Todo: DocumentIdentifiable {
        var clientId = UUID()      // the app's identity of the element (SwiftUI's ForEach); never stored
        var documentId: String?    // the document's id: nil until the element is first saved
        var memo: String
        var completed = false
    }
}

@Suite("README synced state", .timeLimit(.minutes(5)))
struct ReadmeSyncedTests {
    typealias Todo = ReadmeSyncedExample.Todo

    /// The README's example; returns the handle.
    func example(client: TandemClient, directory: URL) async throws -> SyncedCollection<Todo> {
        let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)),
                                     client: client, persistence: try SQLiteCollectionPersistence(managerKey: "todos", directory: directory))
        await todos.load()                                        // one listener; returns with the first state
        todos.withLock { $0.append(Todo(memo: "Buy milk")) }      // shown at once, with its documentId
        let milk = todos.value[0]
        todos.withLock { $0[id: milk.id]?.completed = true }      // writes `completed`, nothing else
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        todos.withLock { _ = $0.remove(id: milk.id) }             // deletes that document, nothing else
        try await todos.save()                                    // every edit so far is on disk
        return todos
    }

    @Test("the README's synced-state example is the code here, and runs against a real server: created, one field written, deleted")
    func readmeExample() async throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let section = try #require(readme.range(of: "## Synced state ("))
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let lines = readme[start.upperBound..<end.lowerBound].split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for line in lines where !line.isEmpty && !line.hasPrefix("import") && !line.hasPrefix("}") {
            let expected = line.replacingOccurrences(of: #"SQLiteCollectionPersistence(managerKey: "todos"))"#,
                                                     with: #"SQLiteCollectionPersistence(managerKey: "todos", directory: directory))"#)
            #expect(source.contains(expected), "the README's line is not in the test: \(line)")
        }

        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let running = RunningClient(server, id: "readme")
        let directory = TemporaryDirectory()
        let todos = try await example(client: running.client, directory: directory.url)
        #expect(await todos.waitUntil { !todos.hasPendingWrites && todos.value.isEmpty })
        let changes = try await server.store.changes(since: .zero, in: nil, limit: 10).changes
        // Created, then `completed` alone, then deleted: three commits on one document.
        #expect(changes.count == 1 && changes.first?.document == nil, "the feed keeps the last state: deleted")
        #expect(try await server.store.currentVersion() == 3)
        await running.stop()
        await server.stop()
    }
}
