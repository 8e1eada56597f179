import Foundation
import Synchronization
import Testing
import TandemTesting
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

    @Test("a group told to report tells the observers even when it changed nothing; idle, the store has no commits under way")
    func promisedReport() async throws {
        let store = try makeStore()
        #expect(!store.commitsUnderWay())
        let notices = Locked<[CommitNotice]>([])
        store.observeCommits { notice in notices.withLock { $0.append(notice) } }
        // A refusal changes no document and takes no version.
        let refused = try CommitPlanner.check([.update(path("notes/missing"), fields: ["v": 1])], limits: ServerLimits())
        for mustReport in [false, true] {
            _ = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Result<[Result<CommitResult, TandemError>], any Error>], any Error>) in
                store.pool.asyncWriteWithoutTransaction { db in
                    continuation.resume(returning: store.commitTogether([.init(requests: [refused], limits: ServerLimits(), clientID: nil)], db: db, mustReport: mustReport))
                }
            }
        }
        #expect(notices.withLock { $0 } == [CommitNotice(batches: [], visibleThrough: .zero)])
        #expect(!store.commitsUnderWay())
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

    @Test("an answer whose named row no longer holds it is unknown, not a failure of every later send")
    func answerLostWithItsRow() async throws {
        let store = try makeStore()
        let id = MutationID(clientID: "phone", sequence: 1)
        let set = Mutation.set(path("notes/a"), ["v": 1]).identified(by: id)
        _ = try await store.commit([set])
        // The row loses the mark naming the answer it holds (a repair by hand, say).
        try await store.pool.write { try $0.execute(sql: "UPDATE documents SET mutation_client = NULL, mutation_sequence = NULL WHERE path = 'notes/a'") }
        let again = try await store.commit([[set]], limits: ServerLimits(), clientID: nil)[0].get()
        #expect(again.acknowledgements.map(\.status) == [.unknown] && again.batch == nil)
        // A new write beside it is refused for good; one of its own applies.
        let beside = try await store.commit([[set, Mutation.set(path("notes/b"), ["v": 1]).identified(by: MutationID(clientID: "phone", sequence: 2))]], limits: ServerLimits(), clientID: nil)[0].get()
        #expect(beside.acknowledgements.map(\.status) == [.unknown, .refused] && beside.acknowledgements[1].error?.code == .failedPrecondition)
        let alone = try await store.commit([Mutation.set(path("notes/b"), ["v": 1]).identified(by: MutationID(clientID: "phone", sequence: 3))])
        #expect(alone.acknowledgements.map(\.status) == [.applied])
    }

    @Test("an answer that names the row it wrote keeps its document when the row is rewritten or deleted, in one request or one shared transaction")
    func answersOutliveTheirRows() async throws {
        let store = try makeStore()
        func phone(_ sequence: UInt64) -> MutationID { MutationID(clientID: "phone", sequence: sequence) }
        func replay(_ mutation: Mutation) async throws -> [WriteAcknowledgement] {
            let result = try await store.commit([mutation])
            #expect(result.batch == nil)
            #expect(result.acknowledgements.allSatisfy { $0.status == .replayed })
            return result.acknowledgements.map { var answer = $0; answer.status = .applied; return answer }
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
        let checked = try [setD, setD2].map { try CommitPlanner.check([$0], limits: ServerLimits()) }
        let shared = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Result<[Result<CommitResult, TandemError>], any Error>], any Error>) in
            store.pool.asyncWriteWithoutTransaction { db in
                continuation.resume(returning: store.commitTogether([.init(requests: [checked[0]], limits: ServerLimits(), clientID: nil), .init(requests: [checked[1]], limits: ServerLimits(), clientID: nil)], db: db))
            }
        }
        let sharedAnswers = try shared.map { try $0.get()[0].get().acknowledgements }
        #expect(sharedAnswers[0][0].document?.data == ["v": 1] && sharedAnswers[1][0].document?.data == ["v": 2])
        _ = try await store.commit([.delete(path("notes/d"))])
        #expect(try await replay(setD) == sharedAnswers[0])
        #expect(try await replay(setD2) == sharedAnswers[1])
        // Across a reopen too.
        let reopened = try makeStore()
        #expect(try await reopened.commit([setA]).acknowledgements == first.map(\.replayed))
    }

    @Test("a database written before answers could name their rows, or kept refusals and digests, opens, and its answers still replay")
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
        // Rows from before digests were kept are taken on trust: any content replays.
        let replay = try await store.commit([Mutation.set(path("notes/a"), ["v": 5]).identified(by: MutationID(clientID: "phone", sequence: 1))])
        #expect(replay.batch == nil)
        #expect(replay.acknowledgements.first?.status == .replayed)
        #expect(replay.acknowledgements.first?.document?.data == ["v": 1] && replay.acknowledgements.first?.version == 1)
        // A sequence below the newest with no row was never decided: refused, not acknowledged.
        let late = await store.commit([[Mutation.set(path("notes/c"), [:]).identified(by: MutationID(clientID: "phone", sequence: 0))]], limits: ServerLimits(), clientID: nil)
        #expect(try late[0].get().acknowledgements.first?.status == .refused)
        #expect(try await store.commit([.set(path("notes/b"), [:])]).batch?.version == 2)
    }

    @Test("writer owners kept before the anonymous prefix: a device's gain it, a user's stay the user's, and the two never meet")
    func migratesWriterOwners() async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("tandem.sqlite").path
        let old = try DatabaseQueue(path: file)
        try SQLiteServerStore.migrator.migrate(old, upTo: "v3: refusals, digests and pruned sequences are kept")
        try await old.write { db in
            try db.execute(sql: """
                INSERT INTO writers VALUES ('phone/notes', 'phone'), ('ada/notes', 'u3:ada'), ('odd/notes', 'u3:adam'), ('zero/notes', 'u03:ada');
                """)
        }
        try old.close()
        let store = try makeStore()
        let owners = try await store.pool.read { try [String: String](uniqueKeysWithValues: Row.fetchAll($0, sql: "SELECT client_id, owner FROM writers").map { ($0[0], $0[1]) }) }
        #expect(owners == ["phone/notes": "a:phone", "ada/notes": "u3:ada", "odd/notes": "a:u3:adam", "zero/notes": "a:u03:ada"])
        func write(_ writer: String, as owner: String) async throws -> TandemError.Code? {
            let outcome = await store.commit([[Mutation.set(path("notes/\(UUID().uuidString)"), [:]).identified(by: MutationID(clientID: writer, sequence: 1))]], limits: ServerLimits(), clientID: owner)
            do { _ = try outcome[0].get(); return nil } catch let error as TandemError { return error.code }
        }
        // The anonymous device keeps its writer ids; Ada keeps hers; an anonymous device that
        // says Ada's owner as its client id gets neither.
        #expect(try await write("phone/notes", as: Principal(device: "phone").writerOwner!) == nil)
        #expect(try await write("ada/notes", as: Principal(identity: .user(AuthenticatedUser(uid: "ada")), device: "x").writerOwner!) == nil)
        #expect(try await write("ada/notes", as: Principal(device: "u3:ada").writerOwner!) == .permissionDenied)
        #expect(try await write("odd/notes", as: Principal(device: "u3:adam").writerOwner!) == nil)
        // A node not yet upgraded (PostgreSQL, several nodes) claims under the bare client id: the
        // device keeps its writer ids, but a bare id that reads as a user's never gives them away.
        let legacy = try await store.pool.write { db in
            try db.execute(sql: "INSERT INTO writers VALUES ('tablet/notes', 'tablet'), ('bob/notes', 'u3:bob')")
        }
        _ = legacy
        #expect(try await write("tablet/notes", as: Principal(device: "tablet").writerOwner!) == nil)
        #expect(try await write("bob/notes", as: Principal(device: "u3:bob").writerOwner!) == .permissionDenied)
        #expect(Principal.readsAsUserOwner("u3:a:b") && Principal.readsAsUserOwner("u2:é") && !Principal.readsAsUserOwner("u03:ada") && !Principal.readsAsUserOwner("u:"))
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
