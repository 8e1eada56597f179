import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem
#if canImport(Glibc)
import Glibc
#endif

/// The crash test: a child process writes through a CollectionSyncEngine with local persistence and
/// is killed with SIGKILL at a random point; a new engine with the same key must hold every write
/// whose call had returned, and none twice.
@Suite("Crash safety", .serialized, .timeLimit(.minutes(5)))
struct CrashTests {
    struct Counter: SyncModel {
        var id: String
        var n: Int
    }

    struct Chore: DocumentIdentifiable {
        var clientId = UUID()
        var documentId: String?
        var title: String
        var done = false
    }

    /// The CrashWriter executable, built beside the test bundle.
    static var writer: URL? { ChildProcess.built("CrashWriter") }

    /// Runs the writer from `first`, kills it after `killAfter` returned writes, and gives the
    /// indices it reported as returned.
    func runAndKill(_ writer: URL, directory: URL, first: Int, killAfter: Int) async throws -> [Int] {
        let lines = try await runAndKillLines(writer, arguments: [directory.path, String(first), "100000"], killAfter: killAfter)
        return lines.compactMap { $0.hasPrefix("returned ") ? Int($0.dropFirst(9)) : nil }
    }

    @Test("synced state: an edit made offline and saved survives the app being killed, and lands once when a new process is online", arguments: [7, 8, 9] as [UInt64])
    func killedSyncedEditor(seed: UInt64) async throws {
        let writer = try #require(Self.writer, "CrashWriter is not built; run `swift build --build-tests` first")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SeededRandomNumberGenerator(seed: seed)
        let lines = try await runAndKillLines(writer, arguments: ["synced", directory.url.path], killAfter: Int.random(in: 1...30, using: &random))
        var saved: [String: String] = [:]
        var done: Set<String> = []
        for line in lines {
            let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
            if parts.count == 3, parts[0] == "saved" { saved[parts[1]] = parts[2] }
            if parts.count == 2, parts[0] == "done" { done.insert(parts[1]) }
        }
        #expect(!saved.isEmpty)

        // Another process, online: the same persistence, a server that has none of it yet.
        let store = MockServer()
        let remote = MockRemoteCollectionService(collectionPath: { "chores" }, store: store)
        let chores = SyncedCollection(CollectionConfiguration<Chore>(collectionPath: "chores"), remote: remote,
                                      persistence: try SQLiteCollectionPersistence(managerKey: "synced-crash", directory: directory.url), managerKey: "synced-crash")
        for (id, title) in saved {
            #expect(chores.value.contains { $0.documentId == id && $0.title == title }, "\(id) was saved, so the relaunch shows it before any network")
        }
        await chores.load()
        #expect(await chores.waitUntil { !chores.hasPendingWrites })
        let stored = store.documents.values.filter { $0.path.parent.description == "chores" }
        for (id, title) in saved {
            let document = stored.first { $0.path.id == id }
            #expect(document?.data["title"] == .string(title), "\(id) landed")
            if done.contains(id) { #expect(document?.data["done"] == true, "\(id)'s edit landed") }
        }
        #expect(stored.count >= saved.count && stored.count <= saved.count + 1, "each saved element once, and at most the one cut off")
        #expect(Set(stored.map(\.path.id)).count == stored.count)
    }

    /// Runs the writer with `arguments`, kills it after `killAfter` lines, and gives the lines.
    func runAndKillLines(_ writer: URL, arguments: [String], killAfter: Int) async throws -> [String] {
        let (lines, killed) = try await ChildProcess.runAndKill(writer, arguments: arguments, afterLines: killAfter)
        #expect(killed, "the writer was killed, not finished")
        return lines
    }

    @Test("no returned write is lost and none is recorded twice", arguments: [1, 2, 3, 4, 5] as [UInt64])
    func killedWriter(seed: UInt64) async throws {
        let writer = try #require(Self.writer, "CrashWriter is not built; run `swift build --build-tests` first")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SeededRandomNumberGenerator(seed: seed)
        var returned: [Int] = []
        let rounds = 2
        var next = 0
        for _ in 0..<rounds {
            let round = try await runAndKill(writer, directory: directory.url, first: next, killAfter: Int.random(in: 1...40, using: &random))
            returned += round
            next = (returned.max() ?? -1) + 2  // skip the index a kill may have cut in half
        }
        #expect(!returned.isEmpty)

        let persistence = try SQLiteCollectionPersistence(managerKey: "crash", directory: directory.url)
        let state = try #require(try persistence.load())
        let entries = state.outbox.entries
        let sequences = entries.map(\.id.sequence)
        #expect(sequences == sequences.sorted() && Set(sequences).count == sequences.count, "ids are unique and in order")
        var saved: [String: Int] = [:]
        var increments = 0
        for entry in entries {
            switch entry.mutation.kind {
            case .set: saved[entry.path.id, default: 0] += 1
            case .update: increments += 1
            default: Issue.record("unexpected write \(entry.mutation)")
            }
        }
        for index in returned {
            #expect(saved["w\(index)"] == 1, "write \(index) returned, so it is recorded exactly once")
        }
        #expect(saved.values.allSatisfy { $0 == 1 })
        #expect(increments >= returned.count && increments <= returned.count + rounds, "one increment per returned write, plus at most the one cut off in each round")

        // Back online, a new engine replays the outbox exactly once.
        let store = MockServer(documents: [Document(path: try DocumentPath("counters/total"), data: ["id": "total", "n": 0])])
        let remote = MockRemoteCollectionService(collectionPath: { "counters" }, store: store)
        let engine = CollectionSyncEngine<Counter>(remote: remote, managerKey: "crash", persistence: persistence, clock: ManualClock())
        await engine.startListening()
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(store.documents[try DocumentPath("counters/total")]?.data["n"] == .int(increments))
        for index in returned {
            #expect(store.documents[try DocumentPath("counters/w\(index)")] != nil)
        }
    }
}
