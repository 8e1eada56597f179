import ArgumentParser
import Foundation
import Logging
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// `tandem demo`: an in-process server and two clients; one goes offline, writes, and comes back.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run a server in-process and two clients; B writes offline and comes back. Exits 0 when both agree with the server."
    )

    @Option(help: "How long to wait for the clients to agree, in seconds.")
    var timeout = 30.0

    struct Note: SyncModel, Equatable {
        var id: String
        var text: String
        var count = 0
    }

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-demo-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("server"))
        Console.out("server: listening on \(server.url.absoluteString) (temporary database in \(directory.path))")
        let notes = try CollectionPath("notes")
        func client(_ name: String) throws -> (TandemClient, CollectionSyncEngine<Note>, Task<Void, any Error>) {
            var configuration = TandemClientConfiguration()
            configuration.clientID = "demo-\(name)"
            configuration.logger.logLevel = .critical
            let client = TandemClient(url: server.url, configuration: configuration)
            let persistence = try SQLiteCollectionPersistence(managerKey: name, directory: directory.appendingPathComponent(name))
            let engine = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: client, collection: notes), managerKey: name, persistence: persistence)
            return (client, engine, Task { try await client.run() })
        }
        let (clientA, a, taskA) = try client("A")
        let (clientB, b, taskB) = try client("B")
        defer {
            taskA.cancel()
            taskB.cancel()
        }
        await clientA.waitUntilConnected()
        await clientB.waitUntilConnected()
        await a.startListening()
        await b.startListening()
        Console.out("A, B: connected and listening to \(notes)")

        try await a.saveDocument(Note(id: "counter", text: "shared counter"))
        try await a.saveDocument(Note(id: "a1", text: "written by A"))
        Console.out("A: saved notes counter and a1")
        try await waitFor("B to see A's notes") { b.getDocument(id: "a1") != nil && b.getDocument(id: "counter") != nil }
        Console.out("B: sees \(Self.describe(b.currentCollection))")

        clientB.setOnline(false)
        try await waitFor("B to go offline") { !clientB.isConnected }
        Console.out("B: offline")
        try await b.saveDocument(Note(id: "b1", text: "written by B offline"))
        try await b.updateDocument(id: "counter", data: ["count": .increment(3)])
        try await b.saveDocument(Note(id: "b2", text: "also offline"))
        Console.out("B (offline): saved b1 and b2, counter +3; sees \(Self.describe(b.currentCollection)), \(b.pendingWrites.count) pending writes")
        try await a.updateDocument(id: "counter", data: ["count": .increment(1)])
        try await a.saveDocument(Note(id: "a2", text: "written by A meanwhile"))
        Console.out("A: counter +1, saved a2; sees \(Self.describe(a.currentCollection))")

        clientB.setOnline(true)
        Console.out("B: back online")
        let expectedIDs = ["a1", "a2", "b1", "b2", "counter"]
        do {
            try await waitFor("both clients to agree with the server") {
                !b.hasPendingWrites && !a.hasPendingWrites
                    && a.currentCollection.map(\.id).sorted() == expectedIDs && b.currentCollection.sorted(by: { $0.id < $1.id }) == a.currentCollection.sorted(by: { $0.id < $1.id })
                    && a.getDocument(id: "counter")?.count == 4
            }
        } catch {
            Console.out("A: sees \(Self.describe(a.currentCollection))")
            Console.out("B: sees \(Self.describe(b.currentCollection)), \(b.pendingWrites.count) pending writes")
            Console.error("demo failed: \(error)")
            await server.stop()
            throw ExitCode(1)
        }
        let onServer = try await server.store.read(.collection(notes, Query())).documents
        let serverNotes = try onServer.map { try JSONValueDecoder().decode(Note.self, from: .object($0.data)) }
        Console.out("A: sees \(Self.describe(a.currentCollection))")
        Console.out("B: sees \(Self.describe(b.currentCollection))")
        Console.out("server: has \(Self.describe(serverNotes))")
        await server.stop()
        guard serverNotes.sorted(by: { $0.id < $1.id }) == a.currentCollection.sorted(by: { $0.id < $1.id }) else {
            Console.error("demo failed: the server disagrees with the clients")
            throw ExitCode(1)
        }
        Console.out("ok: A, B and the server agree on \(serverNotes.count) notes; the counter is 4 (1 from A + 3 from B offline)")
    }

    static func describe(_ notes: [Note]) -> String {
        notes.sorted { $0.id < $1.id }.map { $0.id == "counter" ? "counter=\($0.count)" : $0.id }.joined(separator: ", ")
    }

    /// Polls a condition until it holds or the timeout passes (a demo may wait on the wall clock).
    func waitFor(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        while !condition() {
            guard ContinuousClock.now < deadline else {
                throw TandemError(.deadlineExceeded, "Timed out after \(timeout) s waiting for \(what).")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
