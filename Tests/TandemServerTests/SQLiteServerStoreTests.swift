import Foundation
import Synchronization
import Testing
import TandemCore
@testable import TandemServer
import GRDB

@Suite("SQLite server store")
struct SQLiteServerStoreTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-store-\(UUID().uuidString)")

    func makeStore(_ configure: (inout SQLiteServerStoreConfiguration) -> Void = { _ in }) throws -> SQLiteServerStore {
        var configuration = SQLiteServerStoreConfiguration()
        configure(&configuration)
        return try SQLiteServerStore(directory: directory, configuration: configuration)
    }

    func path(_ text: String) -> DocumentPath { try! DocumentPath(text) }

    @Test("each commit gets the next version; documents keep create time and path metadata")
    func commitsAndReads() async throws {
        let store = try makeStore()
        let first = try await store.commit([.set(path("users/ada"), ["name": "Ada"]), .set(path("users/bob"), ["name": "Bob"])])
        #expect(first.batch?.version == 1)
        #expect(first.acknowledgements.map(\.version) == [1, 1])
        let second = try await store.commit([.update(path("users/ada"), fields: ["age": 36])])
        #expect(second.batch?.version == 2)
        let ada = try #require(try await store.document(at: path("users/ada")))
        #expect(ada.data == ["name": "Ada", "age": 36])
        #expect(ada.version == 2)
        #expect(ada.createTime <= ada.updateTime)
        let snapshot = try await store.read(.collection(try CollectionPath("users"), Query().order(by: "name", descending: true)))
        #expect(snapshot.documents.map(\.path.id) == ["bob", "ada"])
        #expect(snapshot.version == 2)
        #expect(try await store.currentVersion() == 2)
    }

    @Test("an encoded snapshot holds what read gives, in path order, in groups; a query with operations gets none")
    func encodedSnapshots() async throws {
        let store = try makeStore()
        // Parents "p" and "p-x": byte order puts p-x first, path order puts p first.
        _ = try await store.commit([
            .set(path("shops/p-x/reviews/r1"), ["stars": 4, "text": "fine \"quoted\""]),
            .set(path("shops/p/reviews/r2"), ["stars": 5, "when": 1.5]),
            .set(path("shops/p/reviews/r1"), ["stars": 3, "tags": ["a", "b"]]),
            .set(path("reviews/top"), ["stars": 1]),
            .set(path("shops/p/reviews/gone"), ["stars": 0]),
            // Under the collection's paths, but of another collection: the scan passes over it.
            .set(path("shops/p/reviews/r1/replies/x"), ["text": "thanks"]),
        ])
        _ = try await store.commit([.delete(path("shops/p/reviews/gone"))])
        let targets: [ListenTarget] = [
            .collectionGroup("reviews", Query()),
            .collection(try CollectionPath("shops/p/reviews"), Query()),
            .collection(try CollectionPath("empty"), Query()),
        ]
        for target in targets {
            let read = try await store.read(target)
            let encoded = try #require(try await store.encodedSnapshot(target, groupSize: 2))
            #expect(encoded.version == read.version)
            #expect(encoded.count == read.documents.count)
            #expect(encoded.groups.count == max(1, (read.documents.count + 1) / 2))
            var changes: [RemoteChange] = []
            for group in encoded.groups {
                let text = WireWriter.batch(target: 1, changes: group, version: encoded.version, isSnapshot: true, reset: false, more: false)
                guard case .batch(_, let batch, _, _) = try ServerMessage.parse(text) else {
                    Issue.record("not a batch: \(text)")
                    continue
                }
                changes += batch.changes
            }
            #expect(changes == read.documents.map(RemoteChange.upsert))
        }
        // A collection whose paths hold many more of a subcollection's documents than its own: the
        // scan hands over to the collection's index partway, and nothing is lost or repeated.
        _ = try await store.commit([.set(path("c/a"), ["n": 1]), .set(path("c/m"), ["n": 2]), .set(path("c/z"), ["n": 3])])
        for start in stride(from: 0, to: 1_100, by: 500) {
            _ = try await store.commit((start..<min(start + 500, 1_100)).map { .set(path("c/a/sub/\(10_000 + $0)"), ["n": .int($0)]) })
        }
        let crowded = ListenTarget.collection(try CollectionPath("c"), Query())
        let crowdedEncoded = try #require(try await store.encodedSnapshot(crowded, groupSize: 2))
        var crowdedChanges: [RemoteChange] = []
        for group in crowdedEncoded.groups {
            let text = WireWriter.batch(target: 1, changes: group, version: crowdedEncoded.version, isSnapshot: true, reset: false, more: false)
            guard case .batch(_, let batch, _, _) = try ServerMessage.parse(text) else { continue }
            crowdedChanges += batch.changes
        }
        #expect(crowdedChanges.map(\.path.id) == ["a", "m", "z"])
        #expect(crowdedChanges == (try await store.read(crowded)).documents.map(RemoteChange.upsert))

        // Frames go out as they are written, the last marked; a receiver that says stop gets no more.
        let frames = Mutex<[EncodedSnapshotFrame]>([])
        let reviews = ListenTarget.collection(try CollectionPath("shops/p/reviews"), Query())
        let version = try await store.encodedSnapshot(reviews, groupSize: 1) { frame in
            frames.withLock { $0.append(frame) }
            return true
        }
        #expect(version == (try await store.currentVersion()))
        #expect(frames.withLock { $0.map(\.isLast) } == [false, true])
        #expect(frames.withLock { $0.map(\.count) } == [1, 1])
        frames.withLock { $0 = [] }
        _ = try await store.encodedSnapshot(reviews, groupSize: 1) { frame in
            frames.withLock { $0.append(frame) }
            return false
        }
        #expect(frames.withLock { $0.count } == 1)
        #expect(try await store.encodedSnapshot(.collection(try CollectionPath("shops/p/reviews"), Query().limit(to: 1)), groupSize: 2) == nil)
        #expect(try await store.encodedSnapshot(.document(path("shops/p/reviews/r1")), groupSize: 2) == nil)
    }

    @Test("a damaged stored body makes a snapshot fail with data-loss, and the next read after the repair works")
    func damagedBodyInSnapshot() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("notes/a"), ["v": 1]), .set(path("notes/b"), ["v": 2]), .set(path("tags/t"), ["v": 3])])
        try await store.pool.write { try $0.execute(sql: "UPDATE documents SET data = 'oops' WHERE path = 'notes/a'") }
        for target in [ListenTarget.collection(try CollectionPath("notes"), Query()), .collectionGroup("notes", Query())] {
            do {
                _ = try await store.encodedSnapshot(target, groupSize: 10)
                Issue.record("expected data-loss for \(target)")
            } catch {
                #expect((error as? TandemError)?.code == .dataLoss)
            }
        }
        try await store.pool.write { try $0.execute(sql: "UPDATE documents SET data = '{\"v\":1}' WHERE path = 'notes/a'") }
        #expect(try await store.encodedSnapshot(.collection(try CollectionPath("notes"), Query()), groupSize: 10)?.count == 2)
        #expect(try await store.encodedSnapshot(.collectionGroup("tags", Query()), groupSize: 10)?.count == 1)
    }

    @Test("a mutation id applied once is answered with its original result, never applied again")
    func exactlyOnce() async throws {
        let store = try makeStore()
        let id = MutationID(clientID: "phone", sequence: 1)
        let bump = Mutation.update(path("counters/a"), fields: [:], transforms: [.init("n", .increment(1))])
        _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
        let original = try await store.commit([bump.identified(by: id)])
        let replay = try await store.commit([bump.identified(by: id)])
        #expect(replay.acknowledgements == original.acknowledgements)
        #expect(replay.batch == nil)
        #expect(try await store.document(at: path("counters/a"))?.data["n"] == 1)
        // An older sequence of the same client is a replay too; a newer one applies.
        _ = try await store.commit([bump.identified(by: MutationID(clientID: "phone", sequence: 2))])
        #expect(try await store.document(at: path("counters/a"))?.data["n"] == 2)
        // It survives a restart of the store.
        let reopened = try makeStore()
        _ = try await reopened.commit([bump.identified(by: id)])
        #expect(try await reopened.document(at: path("counters/a"))?.data["n"] == 2)
    }

    @Test("an answer that names the row it wrote keeps its document when the row is rewritten or deleted, in one request or one shared transaction")
    func answersOutliveTheirRows() async throws {
        let store = try makeStore()
        func phone(_ sequence: UInt64) -> MutationID { MutationID(clientID: "phone", sequence: sequence) }
        func replay(_ mutation: Mutation) async throws -> [WriteAcknowledgement] {
            let result = try await store.commit([mutation])
            #expect(result.batch == nil)
            return result.acknowledgements
        }
        let setA = Mutation.set(path("notes/a"), ["v": 1]).identified(by: phone(1))
        let setB = Mutation.set(path("notes/b"), ["v": 1]).identified(by: phone(2))
        let first = try await store.commit([setA]).acknowledgements
        let second = try await store.commit([setB]).acknowledgements
        // Most answers name their row instead of copying the document.
        let named = try await store.pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM mutation_results WHERE document IS NULL AND path IS NOT NULL") }
        #expect(named == 2)
        #expect(try await replay(setA) == first)
        _ = try await store.commit([.set(path("notes/a"), ["v": 2])])
        _ = try await store.commit([Mutation.delete(path("notes/b")).identified(by: MutationID(clientID: "tablet", sequence: 1))])
        #expect(try await replay(setA) == first)
        #expect(try await replay(setB) == second)
        #expect(first[0].document?.data == ["v": 1] && second[0].document?.data == ["v": 1])

        // Twice in one request: the first answer is a copy, the last names the row.
        let setC = Mutation.set(path("notes/c"), ["v": 1]).identified(by: phone(3))
        let updateC = Mutation.update(path("notes/c"), fields: ["v": 2]).identified(by: phone(4))
        let both = try await store.commit([setC, updateC]).acknowledgements
        _ = try await store.commit([.delete(path("notes/c"))])
        #expect(try await replay(setC) == [both[0]])
        #expect(try await replay(updateC) == [both[1]])
        #expect(both[0].document?.data == ["v": 1] && both[1].document?.data == ["v": 2])

        // Two requests of one transaction, the second rewriting what the first wrote.
        let setD = Mutation.set(path("notes/d"), ["v": 1]).identified(by: phone(5))
        let setD2 = Mutation.set(path("notes/d"), ["v": 2]).identified(by: MutationID(clientID: "tablet", sequence: 2))
        let shared = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Result<CommitResult, any Error>], any Error>) in
            store.pool.asyncWriteWithoutTransaction { db in
                continuation.resume(returning: store.commitTogether([[setD], [setD2]], db: db))
            }
        }
        let sharedAnswers = try shared.map { try $0.get().acknowledgements }
        #expect(sharedAnswers[0][0].document?.data == ["v": 1] && sharedAnswers[1][0].document?.data == ["v": 2])
        _ = try await store.commit([.delete(path("notes/d"))])
        #expect(try await replay(setD) == sharedAnswers[0])
        #expect(try await replay(setD2) == sharedAnswers[1])
        // Across a reopen too.
        let reopened = try makeStore()
        #expect(try await reopened.commit([setA]).acknowledgements == first)
    }

    @Test("in one shared transaction a repeated mutation id applies once, and a refused request's ids stay unapplied")
    func idsInOneTransaction() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
        let bump = Mutation.update(path("counters/a"), fields: [:], transforms: [.init("n", .increment(1))])
        func together(_ requests: [[Mutation]]) async throws -> [Result<CommitResult, any Error>] {
            try await withCheckedThrowingContinuation { continuation in
                store.pool.asyncWriteWithoutTransaction { db in
                    continuation.resume(returning: store.commitTogether(requests, db: db))
                }
            }
        }
        let once = bump.identified(by: MutationID(clientID: "phone", sequence: 1))
        let first = try await together([[once], [once]])
        #expect(try first[0].get().batch != nil && first[1].get().batch == nil)
        #expect(try first[1].get().acknowledgements == first[0].get().acknowledgements)
        #expect(try await store.document(at: path("counters/a"))?.data["n"] == 1)
        // The first request is refused (a precondition), so its id is not applied: the second,
        // carrying the same id, applies it.
        let next = bump.identified(by: MutationID(clientID: "phone", sequence: 2))
        let second = try await together([[next, Mutation.set(path("counters/b"), [:]).requiring(.version(99))], [next]])
        #expect(throws: TandemError.self) { try second[0].get() }
        #expect(try second[1].get().batch != nil)
        #expect(try await store.document(at: path("counters/a"))?.data["n"] == 2)
        // Later commits know both, from memory and after a reopen.
        #expect(try await store.commit([next]).batch == nil)
        #expect(try await makeStore().commit([once, next]).batch == nil)
        #expect(try await store.document(at: path("counters/a"))?.data["n"] == 2)
    }

    @Test("a database written before answers could name their rows opens, and its answers still replay")
    func migratesStoredAnswers() async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("tandem.sqlite").path
        let old = try DatabaseQueue(path: file)
        try SQLiteServerStore.migrator.migrate(old, upTo: "v1")
        try await old.write { db in
            try db.execute(sql: """
                INSERT INTO documents VALUES ('notes/a', 'notes', 'notes', 1, 0, 0, '{"v":1}', 'phone', 1);
                INSERT INTO mutation_results VALUES ('phone', 1, 1, 0, '{"createTime":"1970-01-01T00:00:00.000Z","data":{"v":1},"path":"notes/a","updateTime":"1970-01-01T00:00:00.000Z","version":1}');
                """)
        }
        try old.close()
        let store = try makeStore()
        let replay = try await store.commit([Mutation.set(path("notes/a"), ["v": 5]).identified(by: MutationID(clientID: "phone", sequence: 1))])
        #expect(replay.batch == nil)
        #expect(replay.acknowledgements.first?.document?.data == ["v": 1] && replay.acknowledgements.first?.version == 1)
        #expect(try await store.commit([.set(path("notes/b"), [:])]).batch?.version == 2)
    }

    @Test("a batch with one refused write writes nothing")
    func atomicBatch() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("a/1"), ["v": 1])])
        do {
            _ = try await store.commit([
                .set(path("a/2"), ["v": 2]),
                Mutation.set(path("a/1"), ["v": 9]).requiring(.version(99)),
            ])
            Issue.record("expected failed-precondition")
        } catch {
            #expect((error as? TandemError)?.code == .failedPrecondition)
        }
        #expect(try await store.document(at: path("a/2")) == nil)
        #expect(try await store.document(at: path("a/1"))?.data == ["v": 1])
        #expect(try await store.currentVersion() == 1)
    }

    @Test("concurrent commits share transactions yet each gets its own version, published in order")
    func groupCommit() async throws {
        let store = try makeStore()
        let published = Mutex<[Version]>([])
        store.observeCommits { batch in published.withLock { $0.append(batch.version) } }
        let versions = try await withThrowingTaskGroup(of: Version.self) { group in
            for index in 0..<64 {
                group.addTask {
                    let result = try await store.commit([.set(self.path("items/\(index)"), ["i": .int(index)])])
                    return try #require(result.batch?.version)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(versions) == Set((1...64).map { Version(UInt64($0)) }))
        #expect(published.withLock { $0 } == (1...64).map { Version(UInt64($0)) })
        #expect(try await store.read(.collection(try CollectionPath("items"), Query())).documents.count == 64)
    }

    @Test("in a shared transaction a refused request writes nothing and the others are committed")
    func refusalsInGroupCommit() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("base/doc"), ["v": 0])])
        let outcomes = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
            for index in 0..<48 {
                group.addTask {
                    // Every third request sets its own document, then fails a precondition.
                    var mutations: [Mutation] = [.set(self.path("items/\(index)"), ["i": .int(index)])]
                    if index % 3 == 0 { mutations.append(Mutation.set(self.path("base/doc"), ["v": .int(index)]).requiring(.version(99))) }
                    do {
                        _ = try await store.commit(mutations)
                        return (index, true)
                    } catch let error as TandemError {
                        #expect(error.code == .failedPrecondition)
                        return (index, false)
                    }
                }
            }
            return try await group.reduce(into: [Int: Bool]()) { $0[$1.0] = $1.1 }
        }
        #expect(store.requestsPerTransaction > 2, "the requests shared transactions")
        #expect(outcomes.filter(\.value).count == 32)
        let stored = try await store.read(.collection(try CollectionPath("items"), Query())).documents.map(\.path.id)
        #expect(Set(stored) == Set((0..<48).filter { $0 % 3 != 0 }.map(String.init)))
        #expect(try await store.document(at: path("base/doc"))?.data == ["v": 0])
        // One version per accepted request, none skipped.
        #expect(try await store.currentVersion() == 33)
    }

    @Test("the change feed pages by version, never splitting a commit, and reports deletes")
    func changeFeed() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("c/1"), [:]), .set(path("c/2"), [:]), .set(path("c/3"), [:])])  // v1
        _ = try await store.commit([.set(path("c/4"), [:])])  // v2
        _ = try await store.commit([.delete(path("c/1"))])  // v3
        let first = try await store.changes(since: 0, in: nil, limit: 2)
        #expect(first.changes.map(\.path.id) == ["2", "3"])  // c/1 moved on to v3; v1 comes whole
        #expect(first.version == 1)
        #expect(first.hasMore)
        let second = try await store.changes(since: first.version, in: nil, limit: 2)
        #expect(second.changes.map(\.path.id) == ["4", "1"])
        #expect(second.changes.last?.document == nil)
        #expect(!second.hasMore)
        #expect(second.version == 3)
        let scoped = try await store.changes(since: 0, in: .collection(try CollectionPath("c"), Query().whereField("x", isEqualTo: 1)), limit: 10)
        #expect(scoped.changes.allSatisfy { $0.document == nil })  // nothing matches: each is a removal
    }

    @Test("after pruning, changes from before the pruned tombstones are out-of-range")
    func pruning() async throws {
        let store = try makeStore()
        _ = try await store.commit([.set(path("c/1"), [:])])
        _ = try await store.commit([.delete(path("c/1"))])
        #expect(try await store.pruneTombstones(olderThan: Date().addingTimeInterval(60)) == 1)
        await #expect(throws: TandemError(.outOfRange, "Changes since version 0 are no longer kept (tombstones through 2 were pruned); reload a full snapshot.")) {
            _ = try await store.changes(since: 0, in: nil, limit: 10)
        }
        #expect(try await store.changes(since: 2, in: nil, limit: 10).changes.isEmpty)
    }

    @Test("pruning never takes the version back and keeps each client's high-water mark, across a reopen")
    func pruningKeepsVersionAndHighWater() async throws {
        let store = try makeStore()
        let bump = Mutation.update(path("c/n"), fields: [:], transforms: [.init("n", .increment(1))])
        _ = try await store.commit([.set(path("c/n"), ["n": 0])])  // v1
        _ = try await store.commit([bump.identified(by: MutationID(clientID: "phone", sequence: 1))])  // v2
        _ = try await store.commit([bump.identified(by: MutationID(clientID: "phone", sequence: 2))])  // v3
        _ = try await store.commit([Mutation.delete(path("c/gone")).identified(by: MutationID(clientID: "tablet", sequence: 1))])  // v4, changes nothing
        _ = try await store.commit([.set(path("c/x"), [:])])  // v5
        _ = try await store.commit([.delete(path("c/x"))])  // v6
        _ = try await store.pruneTombstones(olderThan: Date().addingTimeInterval(60))
        let reopened = try makeStore()
        #expect(try await reopened.currentVersion() == 6)
        #expect(try await reopened.commit([.set(path("c/y"), [:])]).batch?.version == 7)
        // The newest answer of each client survives pruning, so their replays are still recognized.
        _ = try await reopened.commit([bump.identified(by: MutationID(clientID: "phone", sequence: 2))])
        _ = try await reopened.commit([bump.identified(by: MutationID(clientID: "phone", sequence: 1))])
        #expect(try await reopened.document(at: path("c/n"))?.data["n"] == 2)
        let replay = try await reopened.commit([Mutation.delete(path("c/gone")).identified(by: MutationID(clientID: "tablet", sequence: 1))])
        #expect(replay.batch == nil && replay.acknowledgements.first?.version == 4)
    }

    @Test("over-size documents and batches are resource-exhausted and write nothing")
    func limits() async throws {
        let store = try makeStore()
        let big = String(repeating: "x", count: 1 << 20)
        await #expect(throws: TandemError.self) { _ = try await store.commit([.set(self.path("a/big"), ["s": .string(big)])]) }
        let many = (0..<501).map { Mutation.set(path("a/\($0)"), [:]) }
        do {
            _ = try await store.commit(many)
            Issue.record("expected resource-exhausted")
        } catch {
            #expect((error as? TandemError)?.code == .resourceExhausted)
        }
        #expect(try await store.currentVersion() == 0)
    }

    @Test("commits are flushed to disk before they are acknowledged: synchronous is FULL on the writer")
    func durability() async throws {
        let store = try makeStore()
        #expect(try await store.pool.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
        #expect(try await store.pool.write { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "wal")
        let relaxed = try SQLiteServerStore(path: directory.appendingPathComponent("relaxed.sqlite").path, configuration: {
            var configuration = SQLiteServerStoreConfiguration()
            configuration.durableCommits = false
            return configuration
        }())
        #expect(try await relaxed.pool.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 1)
    }
}
