import Foundation
import Synchronization
import IdentifiedCollections
import Testing
@testable import Tandem
import TandemCore
import TandemTesting

struct Todo: DocumentIdentifiable {
    var clientId = UUID()
    var documentId: String?
    var memo: String
    var completed = false
    var rank = 0
    var tags: [String: String] = [:]
}

/// Synced state over the mock server (the real server's semantics, in process): each edit becomes
/// exactly the writes it makes, through the engine's outbox.
@Suite("Synced collection", .timeLimit(.minutes(5)))
struct SyncedCollectionTests {
    func handle(_ remote: MockRemoteCollectionService, orderBy: (String, Bool)? = ("rank", true)) -> SyncedCollection<Todo> {
        SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: orderBy), remote: remote)
    }

    func stored(_ remote: MockRemoteCollectionService, in collection: String = "todos") -> [String: JSONObject] {
        Dictionary(uniqueKeysWithValues: remote.store.documents.values.filter { $0.path.parent.description == collection }.map { ($0.path.id, $0.data) })
    }

    @Test("a new element gets its documentId at once, written back; a second edit before the server answers updates that document: one document, never two")
    func newElementGetsItsIDAtOnce() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        remote.store.goOffline()
        todos.withLock { $0.append(Todo(memo: "milk")) }
        let id = try #require(todos.value.first?.documentId)
        todos.withLock { $0[0].memo = "oat milk" }
        #expect(todos.value.map(\.documentId) == [id] && todos.value[0].memo == "oat milk")
        remote.store.goOnline()
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        #expect(stored(remote) == [id: ["memo": "oat milk", "completed": false, "rank": 0, "tags": [:]]])
        #expect(todos.value.map(\.memo) == ["oat milk"])
    }

    @Test("an edit that only respells a string (é decomposed for precomposed) reaches the server, so the value and the server end the same byte for byte")
    func respelledStringIsWritten() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        todos.withLock { $0.append(Todo(memo: "caf\u{E9}")) }
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        let id = try #require(todos.value.first?.documentId)
        todos.withLock { $0[0].memo = "cafe\u{301}" }
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        let memo = try #require(stored(remote)[id]?["memo"]?.stringValue)
        #expect(Array(memo.utf8) == Array("cafe\u{301}".utf8), "the server holds the new spelling")
    }

    @Test("a one-field edit writes exactly that field path, a nested one its dotted path; removing an element deletes its document alone; a reorder writes nothing")
    func editsWriteWhatChanged() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        todos.withLock {
            $0.append(Todo(memo: "a", rank: 1))
            $0.append(Todo(memo: "b", rank: 2))
        }
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        let engine = todos.engine
        remote.store.goOffline()
        todos.withLock { $0[0].completed = true }
        todos.withLock { $0[1].tags["color"] = "red" }
        try await todos.save()
        let kinds = engine.pendingWrites.map(\.mutation.kind)
        guard kinds.count == 2, case .merge(_, let first?) = kinds[0], case .merge(_, let second?) = kinds[1] else {
            Issue.record("expected two merges with field masks: \(kinds)")
            return
        }
        #expect(first == ["completed"])
        #expect(second == [try FieldPath(["tags", "color"])])
        // Moving elements about changes nothing on the server.
        let before = engine.pendingWrites.count
        todos.withLock { $0.swapAt(0, 1) }
        try await todos.save()
        #expect(engine.pendingWrites.count == before)
        #expect(todos.value.map(\.memo) == ["a", "b"], "kept in the configuration's order")
        let gone = todos.value[0]
        todos.withLock { _ = $0.remove(id: gone.clientId) }
        try await todos.save()
        guard case .delete? = engine.pendingWrites.last?.mutation.kind, engine.pendingWrites.last?.path.id == gone.documentId else {
            Issue.record("expected a delete of \(gone.documentId ?? "")")
            return
        }
        remote.store.goOnline()
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        #expect(stored(remote).values.map { $0["memo"] } == ["b"])
        #expect(stored(remote).values.first?["tags"] == ["color": "red"])
    }

    @Test("a document another client added is never deleted by this handle's edits, made while it had not seen it")
    func othersDocumentsSurvive() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        remote.store.goOffline()
        // Another client adds a document this handle has not seen; this one edits meanwhile.
        _ = try remote.store.commit([.set(try DocumentPath("todos/theirs"), ["memo": "theirs", "completed": false, "rank": 5, "tags": [:]])])
        todos.withLock { $0.append(Todo(memo: "mine", rank: 1)) }
        todos.withLock { $0[0].completed = true }
        remote.store.goOnline()
        #expect(await todos.waitUntil { !todos.hasPendingWrites && todos.value.count == 2 })
        #expect(Set(stored(remote).keys).contains("theirs"))
        #expect(todos.value.map(\.memo) == ["mine", "theirs"])
    }

    @Test("the server's changes flow in: elements keep their clientId, the value keeps its order, and a pending edit is never reverted by them")
    func remoteChangesFlowIn() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        todos.withLock { $0.append(Todo(memo: "a", rank: 2)) }
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        let clientId = todos.value[0].clientId
        let id = try #require(todos.value[0].documentId)
        _ = try remote.store.commit([.set(try DocumentPath("todos/z"), ["memo": "z", "completed": false, "rank": 1, "tags": [:]])])
        #expect(await todos.waitUntil { todos.value.count == 2 })
        #expect(todos.value.map(\.memo) == ["z", "a"] && todos.value[id: clientId]?.documentId == id)
        // Offline, an edit; meanwhile the server changes the same document's other field.
        remote.store.goOffline()
        todos.withLock { $0[id: clientId]?.memo = "a, edited" }
        _ = try remote.store.commit([.merge(try DocumentPath("todos/\(id)"), ["rank": 3], fields: ["rank"])])
        remote.store.goOnline()
        #expect(await todos.waitUntil { !todos.hasPendingWrites && todos.value[id: clientId]?.rank == 3 })
        #expect(todos.value[id: clientId]?.memo == "a, edited")
        #expect(todos.value.map(\.memo) == ["z", "a, edited"])
    }

    @Test("an edit the engine could not store (its saved state unreadable) is taken back from the value, which shows the engine's again, and save() and lastError say why")
    func unstoredEditIsTakenBack() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-synced-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A queued write of this handle's engine that cannot be read.
        let persistence = try SQLiteCollectionPersistence(managerKey: "unreadable", directory: directory)
        var outbox = try persistence.create(clientID: "w").outbox
        var change = LocalCollectionChange()
        change.outboxPuts = [outbox.enqueue(.delete(try DocumentPath("todos/old"))).entry]
        try persistence.apply(change)
        try await persistence.pool.write { db in try db.execute(sql: "UPDATE outbox SET mutation = '{' WHERE manager_key = 'unreadable'") }

        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        _ = try remote.store.commit([.set(try DocumentPath("todos/a"), ["memo": "a", "completed": false, "rank": 1, "tags": [:]])])
        let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("rank", true)), remote: remote,
                                     persistence: try SQLiteCollectionPersistence(managerKey: "unreadable", directory: directory), managerKey: "unreadable")
        await todos.load()
        #expect(await todos.waitUntil { todos.value.map(\.memo) == ["a"] })
        todos.withLock { $0[0].memo = "edited" }
        // Whether the refusal came before it or not, save() says the edit was not stored.
        await #expect(throws: TandemError.self) { try await todos.save() }
        try await todos.save()  // told once
        #expect(await todos.waitUntil { todos.value.map(\.memo) == ["a"] && !todos.hasPendingWrites && todos.lastError != nil })
        #expect((todos.lastError as? TandemError)?.code == .failedPrecondition)
        #expect(stored(remote)["a"]?["memo"] == "a")
    }

    @Test("an edit the server refuses for good is rolled back, and lastError says why")
    func refusedEditRollsBack() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        let todos = handle(remote)
        await todos.load()
        todos.withLock { $0.append(Todo(memo: "fine")) }
        #expect(await todos.waitUntil { !todos.hasPendingWrites })
        todos.withLock { $0[0].memo = String(repeating: "x", count: 2 << 20) }
        #expect(await todos.waitUntil { !todos.hasPendingWrites && todos.lastError != nil })
        #expect((todos.lastError as? TandemError)?.code == .resourceExhausted)
        #expect(todos.value.map(\.memo) == ["fine"])
        #expect(stored(remote).values.map { $0["memo"] } == ["fine"])
    }

    @Test("not available (no collection path): loading says why and attaches nothing; an edit is refused at once, the value left as it was")
    func notAvailable() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { nil })
        let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: { nil }), remote: remote)
        await todos.load()
        #expect(todos.loadError != nil)
        #expect(remote.store.listenerCount == 0)
        todos.withLock { $0.append(Todo(memo: "nowhere")) }
        #expect(todos.value.isEmpty)
        #expect((todos.lastError as? TandemError)?.code == .unavailable)
        #expect(!todos.hasPendingWrites)
    }

    struct Scored: DocumentIdentifiable {
        var clientId = UUID()
        var documentId: String?
        var memo: String
        var score = 0.0
    }

    struct Refused: Error {}

    @Test("an edit whose closure throws, or that holds a value no write can carry, leaves every element as it was and writes nothing")
    func failedEditChangesNothing() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "scored" })
        let scored = SyncedCollection(CollectionConfiguration<Scored>(collectionPath: "scored", orderBy: ("memo", true)), remote: remote)
        await scored.load()
        scored.withLock { $0.append(contentsOf: [Scored(memo: "a"), Scored(memo: "b"), Scored(memo: "c")]) }
        #expect(await scored.waitUntil { !scored.hasPendingWrites })
        let before = scored.value
        let commits = remote.store.commitCount
        // The closure changes an element in place, adds one, then throws.
        #expect(throws: Refused.self) {
            try scored.withLock { value in
                value[1].memo = "b, changed"
                value.append(Scored(memo: "d"))
                throw Refused()
            }
        }
        #expect(scored.value == before)
        // A number JSON cannot hold, beside a good change: neither is made.
        scored.withLock { value in
            value[0].score = .nan
            value[2].memo = "c, changed"
        }
        #expect(scored.value == before)
        #expect((scored.lastError as? TandemError)?.code == .invalidArgument)
        #expect(!scored.hasPendingWrites && remote.store.commitCount == commits)
        // The next edit diffs against the value as it is.
        scored.withLock { $0[2].memo = "c, then" }
        #expect(await scored.waitUntil { !scored.hasPendingWrites })
        #expect(stored(remote, in: "scored").values.compactMap { $0["memo"]?.stringValue }.sorted() == ["a", "b", "c, then"])
    }

    @Test("the diff compares nested maps key by key and anything else whole")
    func changedPaths() {
        let old: JSONObject = ["a": 1, "m": ["x": 1, "y": ["deep": true]], "list": [1, 2], "gone": "g"]
        let new: JSONObject = ["a": 1, "m": ["x": 2, "y": ["deep": true], "z": 0], "list": [1, 3], "new": "n"]
        #expect(SyncedEdits.changedPaths(old, new) == [["gone"], ["list"], ["m", "x"], ["m", "z"], ["new"]])
        #expect(SyncedEdits.changedPaths(old, old).isEmpty)
        // A string respelled, which Swift's == calls equal, is a change the server must get.
        let precomposed: JSONObject = ["memo": "caf\u{E9}", "m": ["k": ["K"]]]
        let respelled: JSONObject = ["memo": "cafe\u{301}", "m": ["k": ["\u{212A}"]]]
        #expect(precomposed == respelled, "Swift calls them equal")
        #expect(SyncedEdits.changedPaths(precomposed, respelled) == [["m", "k"], ["memo"]])
        #expect(SyncedEdits.changedPaths(respelled, respelled).isEmpty)
        #expect(SyncedEdits.changedPaths(["n": 1], ["n": 1.0]) == [["n"]], "an int and a double differ")
    }
}

struct Settings: DocumentIdentifiable {
    var clientId = UUID()
    var documentId: String?
    var darkMode = false
    var fontSize = 12
}

@Suite("Synced document and query", .timeLimit(.minutes(5)))
struct SyncedDocumentAndQueryTests {
    @Test("a synced document shows its default until it exists; the first edit creates it, the next merges only the field it changed; the server's changes flow in; delete goes back to the default; one clientId throughout")
    func document() async throws {
        let remote = MockRemoteDocumentService(collectionPath: { "settings" })
        let defaults = Settings()
        let settings = SyncedDocument(DocumentConfiguration<Settings>(collectionPath: "settings", documentId: "me"), default: defaults, remote: remote)
        await settings.load()
        #expect(!settings.exists && settings.value.documentId == "me" && settings.value.fontSize == 12)
        // A read, or an edit that leaves the default as it was, creates nothing (the document
        // might exist on the server, not loaded yet: the default's fields would overwrite it).
        #expect(settings.withLock { $0.darkMode } == false)
        settings.withLock { $0.fontSize = 12 }
        #expect(!settings.exists && settings.engine.pendingWrites.isEmpty)
        settings.withLock { $0.darkMode = true }
        #expect(settings.exists && settings.value.darkMode)
        #expect(await settings.waitUntil { !settings.hasPendingWrites })
        #expect(remote.store.documents[try DocumentPath("settings/me")]?.data == ["darkMode": true, "fontSize": 12])
        remote.store.goOffline()
        settings.withLock { $0.fontSize = 14 }
        try await settings.save()
        guard case .merge(_, let fields?)? = settings.engine.pendingWrites.last?.mutation.kind else {
            Issue.record("expected a merge with a field mask")
            return
        }
        #expect(fields == ["fontSize"])
        remote.store.goOnline()
        _ = try remote.store.commit([.merge(try DocumentPath("settings/me"), ["darkMode": false], fields: ["darkMode"])])
        #expect(await settings.waitUntil { !settings.hasPendingWrites && settings.value.darkMode == false && settings.value.fontSize == 14 })
        #expect(settings.value.clientId == defaults.clientId)
        settings.delete()
        #expect(!settings.exists && settings.value.fontSize == 12)
        #expect(await settings.waitUntil { !settings.hasPendingWrites })
        #expect(remote.store.documents[try DocumentPath("settings/me")] == nil)
    }

    @Test("a synced query is live and read-only; loading another query swaps its one listener and the value follows it")
    func query() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        _ = try remote.store.commit([
            .set(try DocumentPath("todos/a"), ["memo": "a", "completed": false, "rank": 2, "tags": [:]]),
            .set(try DocumentPath("todos/b"), ["memo": "b", "completed": true, "rank": 1, "tags": [:]]),
        ])
        let open = SyncedQuery<Todo>(collectionPath: { "todos" }, remote: remote) { $0.whereField("completed", isEqualTo: false) }
        await open.load()
        #expect(open.value.map(\.memo) == ["a"])
        _ = try remote.store.commit([.set(try DocumentPath("todos/c"), ["memo": "c", "completed": false, "rank": 0, "tags": [:]])])
        #expect(await open.waitUntil { open.value.map(\.memo) == ["a", "c"] })
        await open.load { $0.order(by: "rank") }
        #expect(open.value.map(\.memo) == ["c", "b", "a"])
        #expect(await remote.store.waitForListeners(count: 1))
    }

    struct UserTodos: KeyCollectionRequest {
        let userId: String
        var configuration: CollectionConfiguration<Todo> { .init(collectionPath: "users/\(userId)/todos", orderBy: ("rank", true)) }
    }

    @Test("a reusable request names its configuration from its parameters")
    func requests() {
        let request = UserTodos(userId: "ada")
        #expect(request.configuration.collectionPath() == "users/ada/todos")
        #expect(request.configuration.listenedQuery == Query().order(by: "rank"))
    }
}

@Suite("Synced handles: identity and testing", .timeLimit(.minutes(5)))
struct SyncedIdentityTests {
    @Test("two handles with equal configurations share one store and engine (an edit through one is the other's value at once); another order keeps them apart; when both go, their engine goes")
    func equalConfigurationsShare() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        weak var engine: CollectionSyncEngine<SyncedRow>?
        do {
            let first = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("rank", true)), remote: remote)
            let second = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("rank", true)), remote: remote)
            let other = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)), remote: remote)
            #expect(first.store === second.store && first.engine === second.engine)
            #expect(first.store !== other.store)
            engine = first.engine
            await first.load()
            await second.load()
            await other.load()
            #expect(await remote.store.waitForListeners(count: 2), "one listener for the two that share, one for the other")
            first.withLock { $0.append(Todo(memo: "shared", rank: 1)) }
            #expect(second.value.map(\.memo) == ["shared"])
            #expect(await second.waitUntil { !second.hasPendingWrites })
            #expect(await other.waitUntil { other.value.map(\.memo) == ["shared"] })
        }
        #expect(engine == nil, "nothing keeps a shared engine alive once its handles go")
    }

    @Test("under a testing context a handle shows its testing value, edits change that value alone, and nothing is listened to or written")
    func testingContext() async throws {
        let remote = MockRemoteCollectionService(collectionPath: { "todos" })
        try await SyncedStateContext.$current.withValue(.test) {
            let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", testingValue: [Todo(memo: "test one")]), remote: remote)
            await todos.load()
            #expect(todos.value.map(\.memo) == ["test one"])
            todos.withLock { $0.append(Todo(memo: "test two")) }
            #expect(todos.value.map(\.memo) == ["test one", "test two"] && todos.value.allSatisfy { $0.documentId != nil })
            #expect(!todos.hasPendingWrites)
            try await todos.save()
            let settings = SyncedDocument(DocumentConfiguration<Settings>(collectionPath: "settings", documentId: "me", testingValue: Settings(darkMode: true)),
                                          default: Settings(), remote: MockRemoteDocumentService(collectionPath: { "settings" }, store: remote.store))
            #expect(settings.value.darkMode && settings.value.documentId == "me")
        }
        #expect(remote.store.listenerCount == 0)
        #expect(remote.store.documents.isEmpty)
    }

    /// An element that counts how often it is decoded.
    struct Counted: DocumentIdentifiable {
        static let decodes = Atomic<Int>(0)
        var clientId = UUID()
        var documentId: String?
        var memo: String
        var rank: Int

        enum CodingKeys: String, CodingKey { case clientId, documentId, memo, rank }

        init(memo: String, rank: Int) {
            self.memo = memo
            self.rank = rank
        }

        init(from decoder: any Decoder) throws {
            Self.decodes.add(1, ordering: .relaxed)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            clientId = try container.decodeIfPresent(UUID.self, forKey: .clientId) ?? UUID()
            documentId = try container.decodeIfPresent(String.self, forKey: .documentId)
            memo = try container.decode(String.self, forKey: .memo)
            rank = try container.decode(Int.self, forKey: .rank)
        }
    }

    @Test("edits made as fast as the engine records them: each engine change decodes only the documents it changed, no edit is reverted, and a remote change of another element comes in beside an edit")
    func refreshDecodesOnlyWhatChanged() async throws {
        let documents = try (0..<2_000).map { index in
            Document(path: try DocumentPath(String(format: "counted/c%04d", index)), data: ["memo": .string("m\(index)"), "rank": .int(index)], version: 1)
        }
        let remote = MockRemoteCollectionService(collectionPath: { "counted" }, store: MockServer(documents: documents))
        let handle = SyncedCollection(CollectionConfiguration<Counted>(collectionPath: "counted", orderBy: ("rank", true)), remote: remote)
        await handle.load()
        #expect(handle.value.count == 2_000)
        remote.store.goOffline()
        let before = Counted.decodes.load(ordering: .relaxed)
        // Each edit is made as soon as the one before is recorded, while the engine's change for
        // that one is still being taken: a refresh that lost that race still moves its base on.
        for step in 0..<100 {
            handle.withLock { $0[(step * 37) % 2_000].memo = "edited \(step)" }
            try await handle.save()
        }
        #expect(await handle.waitUntil { handle.value[(99 * 37) % 2_000].memo == "edited 99" })
        #expect((0..<100).allSatisfy { step in handle.value[(step * 37) % 2_000].memo == "edited \(step)" })
        #expect(handle.engine.pendingWrites.count == 100)
        let decoded = Counted.decodes.load(ordering: .relaxed) - before
        #expect(decoded <= 200, "100 one-element edits decoded \(decoded) documents")

        // An edit keeps its element while another element's remote change comes in.
        let edited = handle.value[0].clientId
        handle.withLock { $0[0].memo = "local" }
        let other = try #require(handle.value[1].documentId)
        handle.engine.core.applyNow(RemoteChangeBatch(isSnapshot: false, changes: [
            .upsert(Document(path: try DocumentPath("counted/\(other)"), data: ["memo": "remote", "rank": 1], version: 2)),
        ], version: 2))
        #expect(await handle.waitUntil { handle.value[1].memo == "remote" })
        #expect(handle.value[id: edited]?.memo == "local")
    }
}
