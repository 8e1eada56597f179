// This file imports what an app set up as the README says imports, and nothing else: every type
// the README's client example names must come with `import Tandem`.
import Foundation
import Tandem
import Testing

/// The README's `TandemClient` example, compiled as an app copies it: with `import Tandem` alone
/// (and Foundation), the way the README sets a package up (`.product(name: "Tandem", …)`).
enum ReadmeClientImport {
    struct Todo: SyncModel {
        let id: String
        var title: String
    }

    /// The README's block, line for line (checked below); compiled, not run.
    static func example() async throws {
        let client = TandemClient(url: URL(string: "http://127.0.0.1:8080")!)
        let todos = CollectionSyncEngine<Todo>(
            remote: TandemRemoteCollectionService(client: client, collection: try CollectionPath("todos")),
            managerKey: "todos")

        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await client.run() }     // or add `client` to your ServiceGroup
            await todos.startListening()
            try await todos.saveDocument(Todo(id: "1", title: "Write the docs"))
        }
    }

    /// More of what the README's sections name, through `import Tandem` alone.
    static func types() throws -> [Any] {
        let path = try DocumentPath("products/p1/reviews/r9")
        let query = Query().whereField("price", isLessThan: 100)
        let either = Query().whereFilter(Filter.orFilter([Filter.whereField("price", isLessThan: 100), Filter.whereField("stock", isEqualTo: 0)]))
        let value: JSONValue = ["stock": 1]
        let error = TandemError.invalidArgument("x")
        return [path, query, either, value, error, Mutation.delete(path), Version(1)]
    }
}

@Suite("README client imports")
struct ReadmeClientImportTests {
    @Test("the README's client example is this file's, line for line, and compiles with import Tandem alone")
    func example() throws {
        let readme = try String(contentsOf: URL(filePath: #filePath).deletingLastPathComponent().appendingPathComponent("../../README.md").standardized, encoding: .utf8)
        let section = try #require(readme.range(of: "## Connecting the engines to a server (`TandemClient`)"))
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "\n```", range: start.upperBound..<readme.endIndex))
        let block = readme[start.upperBound..<end.lowerBound].split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let source = try String(contentsOf: URL(filePath: #filePath), encoding: .utf8)
        let lines = Set(source.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        #expect(block.first == "import Foundation" && block.dropFirst().first == "import Tandem", "the block's imports: \(block.prefix(2))")
        for line in block {
            #expect(lines.contains(line), "the README's line is not in this file: \(line)")
        }
        #expect(try ReadmeClientImport.types().count == 7)
    }
}
