import Foundation
import IdentifiedCollections
import Testing
@testable import Tandem
import TandemCore
import TandemTesting

/// Seeded runs of random edits against the mock server (the real server's semantics, in process):
/// appends, field edits and removals through a `SyncedCollection`, documents another client adds
/// meanwhile, offline periods, and restarts of the app (the handle and its engine dropped and made
/// again over the same persistence) between an edit and its send.
///
/// After every step, every element the app edited shows its latest edit (nothing reverted while
/// pending); at the end, online and settled, the value equals the server, every edit landed once
/// (no element lost, none doubled), and every document the other client added is there unless the
/// app removed it.
///
/// `TANDEM_SYNCED_RUNS=N` runs N seeds instead of the suite's 200; `TANDEM_SYNCED_SEED=S` replays one;
/// `TANDEM_SYNCED_NO_RESTART=1` leaves the restarts out (to tell their failures from the others).
@Suite("Synced state properties", .timeLimit(.minutes(5)))
struct SyncedPropertyTests {
    static var seeds: [UInt64] {
        let environment = ProcessInfo.processInfo.environment
        if let seed = environment["TANDEM_SYNCED_SEED"].flatMap(UInt64.init) { return [seed] }
        let runs = environment["TANDEM_SYNCED_RUNS"].flatMap(Int.init) ?? 200
        return (0..<UInt64(runs)).map { $0 &* 7_919 &+ 17 }
    }

    @Test("random edits, offline periods and restarts: nothing reverted while pending; at the end the value equals the server, each edit landed once")
    func randomEdits() async throws {
        for seed in Self.seeds {
            try await run(seed: seed)
        }
    }

    /// The app's own model of what it edited: each element it made or changed, by document id.
    struct Model {
        var mine: [String: Todo] = [:]
        var removed: Set<String> = []
        var theirs: Set<String> = []
    }

    func run(seed: UInt64) async throws {
        var random = SeededRandomNumberGenerator(seed: seed)
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let persistence = MockLocalCollectionPersistence()
        let configuration = CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("rank", true))
        var todos: SyncedCollection<Todo>? = SyncedCollection(configuration, remote: remote, persistence: persistence, managerKey: "prop-\(seed)")
        await todos!.load()
        var model = Model()
        var offline = false
        var made = 0
        for step in 0..<Int.random(in: 8...24, using: &random) {
            let action = Int.random(in: 0..<10, using: &random)
            if action >= 8 {
                // A restart between an edit and its send: the edits are on disk, then the app
                // (the handle, its engine) goes, and comes back over the same persistence.
                guard offline, ProcessInfo.processInfo.environment["TANDEM_SYNCED_NO_RESTART"] == nil else { continue }
                try await todos!.save()
                todos = nil
                // Another process: its own remote (so nothing of the old one's state is shared),
                // on the same server connection and persistence.
                todos = SyncedCollection(configuration, remote: MockRemoteCollectionService(collectionPath: { "todos" }, store: remote.store),
                                         persistence: persistence, managerKey: "prop-\(seed)")
                await todos!.load()
            }
            let handle = todos!
            switch action {
            case 0...2:
                made += 1
                handle.withLock { $0.append(Todo(memo: "m\(made)", rank: Int.random(in: 0..<5, using: &random))) }
                let element = try #require(handle.value.last(where: { $0.memo == "m\(made)" }), "seed \(seed) step \(step)")
                model.mine[element.documentId!] = element
            case 3...4:
                guard let element = handle.value.randomElement(using: &random) else { continue }
                var edited = element
                switch Int.random(in: 0..<3, using: &random) {
                case 0: edited.memo += "+"
                case 1: edited.completed.toggle()
                default: edited.tags["k\(Int.random(in: 0..<3, using: &random))"] = "v\(step)"
                }
                handle.withLock { $0[id: element.clientId] = edited }
                model.mine[edited.documentId!] = edited
            case 5:
                guard let element = handle.value.randomElement(using: &random) else { continue }
                handle.withLock { _ = $0.remove(id: element.clientId) }
                model.mine.removeValue(forKey: element.documentId!)
                model.removed.insert(element.documentId!)
            case 6:
                let id = "theirs\(step)"
                _ = try remote.store.commit([.set(try DocumentPath("todos/\(id)"), ["memo": .string(id), "completed": false, "rank": .int(Int.random(in: 0..<5, using: &random)), "tags": [:]])])
                model.theirs.insert(id)
            case 7:
                offline.toggle()
                if offline { remote.store.goOffline() } else { remote.store.goOnline() }
            default:
                break
            }
            // Nothing the app edited is ever shown older than its latest edit.
            let shown = Dictionary(todos!.value.map { ($0.documentId ?? "", $0) }, uniquingKeysWith: { first, _ in first })
            for (id, expected) in model.mine {
                let element = shown[id]
                #expect(element.flatMap { try? SyncedKeys.body(of: $0) } == (try? SyncedKeys.body(of: expected)),
                        "seed \(seed) step \(step): \(id) shows \(String(describing: element)), edited to \(expected)")
            }
            for id in model.removed { #expect(shown[id] == nil, "seed \(seed) step \(step): \(id) was removed") }
        }
        remote.store.goOnline()
        let handle = todos!
        let settled = await handle.waitUntil {
            !handle.hasPendingWrites && Set(handle.value.compactMap(\.documentId)) == Set(remote.store.documents.keys.map(\.id))
        }
        #expect(settled, "seed \(seed): never settled")
        let server = remote.store.documents
        #expect(server.count == handle.value.count, "seed \(seed): \(server.count) documents, \(handle.value.count) elements; the engine shows \(handle.engine.core.shownDocuments.map(\.path.id)), the server has \(server.keys.map(\.id)), removed \(model.removed)")
        for element in handle.value {
            let stored = server[try DocumentPath("todos/\(element.documentId!)")]
            #expect(stored?.data == (try SyncedKeys.body(of: element)), "seed \(seed): \(element.documentId!) differs from the server: \(String(describing: stored?.data)) there, \(element) here; pending \(handle.engine.pendingWrites.map(\.mutation))")
        }
        for (id, expected) in model.mine {
            #expect(server[try DocumentPath("todos/\(id)")]?.data["memo"] == .string(expected.memo), "seed \(seed): \(id) lost its edit")
        }
        for id in model.theirs where !model.removed.contains(id) {
            #expect(server[try DocumentPath("todos/\(id)")] != nil, "seed \(seed): the other client's \(id) was deleted")
        }
        for id in model.removed { #expect(server[try DocumentPath("todos/\(id)")] == nil, "seed \(seed): \(id) came back") }
    }
}
