import Foundation
import GRDB
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

@Suite("SQLiteCollectionPersistence")
struct SQLiteCollectionPersistenceTests {
    func document(_ id: String, _ data: JSONObject, version: Version = 1) -> Document {
        Document(path: try! DocumentPath("products/\(id)"), data: data, version: version, createTime: Date(timeIntervalSince1970: 100))
    }

    @Test("documents, outbox and resume version survive a new connection to the file")
    func durableAcrossConnections() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("collections.sqlite").path
        do {
            let persistence = try SQLiteCollectionPersistence(managerKey: "products", pool: DatabasePool(path: path))
            #expect(try persistence.load() == nil)
            var state = try persistence.create(clientID: "client-9")
            let first = state.outbox.enqueue(.set(try DocumentPath("products/a"), ["price": 1.5])).entry
            let second = state.outbox.enqueue(.update(try DocumentPath("products/b"), fields: ["n": 1])).entry
            var change = LocalCollectionChange()
            change.upserts = [document("a", ["price": 1.0, "tags": ["x"]], version: 3), document("b", ["n": 0])]
            change.outboxPuts = [first, second]
            change.nextSequence = state.outbox.nextSequence
            change.resumeVersion = 3
            try persistence.apply(change)
        }
        let reopened = try SQLiteCollectionPersistence(managerKey: "products", pool: DatabasePool(path: path))
        let loaded = try #require(try reopened.load())
        #expect(loaded.documents.sorted { $0.path < $1.path }.map(\.data) == [["price": 1.0, "tags": ["x"]], ["n": 0]])
        #expect(loaded.documents.first { $0.path.id == "a" }?.version == 3)
        #expect(loaded.outbox.entries.map(\.id.sequence) == [1, 2])
        #expect(loaded.outbox.clientID == "client-9")
        #expect(loaded.outbox.entries.first?.mutation.kind == .set(["price": 1.5]))
        #expect(loaded.resumeVersion == 3)
    }

    @Test("every kind of queued write comes back from disk as it was stored, and entries stored by an earlier version still load")
    func storedMutations() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = try DocumentPath("products/a")
        let mutations: [Mutation] = [
            .set(path, ["price": 1.5, "tags": ["x", 2, nil], "nested": ["deep": ["on": true]]], transforms: [Mutation.Transform("stamp", .serverTimestamp)]),
            .merge(path, ["a": ["b": 1]], fields: ["a.b", "c"], transforms: [Mutation.Transform("n", .increment(2))]),
            .merge(path, ["a": 1]),
            .update(path, fields: ["a.b": "x", "z": 2.25], transforms: [Mutation.Transform("tags", .arrayUnion(["y"])), Mutation.Transform("old", .arrayRemove([1])), Mutation.Transform("gone", .delete)]),
            Mutation(path: path, kind: .delete, precondition: .exists(true)),
            Mutation(path: path, kind: .set([:]), precondition: .version(7)),
        ]
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        var state = try persistence.create(clientID: "c")
        var change = LocalCollectionChange()
        change.outboxPuts = mutations.map { state.outbox.enqueue(batch: [$0])[0] }
        change.nextSequence = state.outbox.nextSequence
        try persistence.apply(change)
        let loaded = try #require(try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url).load())
        #expect(loaded.outbox.entries.count == mutations.count)
        for (stored, original) in zip(loaded.outbox.entries, change.outboxPuts) {
            // The same write: applied to the same document, it gives the same body.
            let before: JSONObject = ["a": ["b": 0, "k": 1], "old": [1, 2], "gone": 1, "tags": ["x"]]
            let time = ServerTime(Date(timeIntervalSince1970: 5))
            #expect(stored.mutation.applyToBody(before, serverTime: time) == original.mutation.applyToBody(before, serverTime: time))
            #expect(stored.mutation.precondition == original.mutation.precondition)
            #expect(stored.id == original.id && stored.batch == original.batch)
        }

        // A row written as earlier versions wrote it (the mutation through Codable) reads the same.
        let earlier = JSONText.encode(try JSONValueEncoder().encode(mutations[3]))
        let read = try SQLiteCollectionPersistence.mutation(fromStored: earlier)
        #expect(read == mutations[3])
        #expect(throws: TandemError.self) { try SQLiteCollectionPersistence.mutation(fromStored: #"{"op": "paint"}"#) }
    }

    @Test("a large cache loads in path order on two cores; a model that no longer decodes is left out and logged; a damaged row is data-loss")
    func largeCache() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("collections.sqlite").path
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", pool: DatabasePool(path: path))
        _ = try persistence.create(clientID: "c")
        var change = LocalCollectionChange()
        // Written out of order; one document in the second half has a name that is not a string.
        change.upserts = (0..<6_000).reversed().map { index in
            document(String(format: "p%05d", index), ["id": .string(String(format: "p%05d", index)), "name": index == 4_500 ? 7 : "n", "price": 1, "stock": 1])
        }
        try persistence.apply(change)
        let loaded = try #require(try persistence.load())
        #expect(loaded.documents.map(\.path.id) == (0..<6_000).map { String(format: "p%05d", $0) })

        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collectionPath: { "products" }), managerKey: "products",
                                                   persistence: persistence, logger: logger)
        #expect(engine.currentCollection.count == 5_999)
        #expect(engine.currentCollection.map(\.id) == (0..<6_000).filter { $0 != 4_500 }.map { String(format: "p%05d", $0) })
        #expect(logger.events(named: "products_decode_fail").map { $0.parameters["document_id"] as? String } == ["p04500"])

        // A row whose JSON is damaged, in the half parsed on the other core.
        let pool = try DatabasePool(path: path)
        try pool.write { db in try db.execute(sql: "UPDATE document SET data = '{\"broken' WHERE path = 'products/p05000'") }
        #expect { try SQLiteCollectionPersistence(managerKey: "products", pool: pool).load() } throws: { error in
            (error as? TandemError)?.code == .dataLoss && (error as? TandemError)?.message.contains("p05000") == true
        }
    }

    @Test("a commit that queues a write or moves the sequence is flushed to disk; server state and acknowledgements are not")
    func queuedWritesAreFlushed() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        var state = try persistence.create(clientID: "client-1")
        func synchronous() throws -> Int? { try persistence.pool.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } }

        var snapshot = LocalCollectionChange()
        snapshot.replacesAllDocuments = true
        snapshot.upserts = [document("a", ["n": 1])]
        snapshot.resumeVersion = 4
        try persistence.apply(snapshot)
        #expect(persistence.flushedCommits.load(ordering: .relaxed) == 0)

        let entry = state.outbox.enqueue(.update(try DocumentPath("products/a"), fields: ["n": 2])).entry
        var write = LocalCollectionChange()
        write.outboxPuts = [entry]
        write.nextSequence = state.outbox.nextSequence
        try persistence.apply(write)
        #expect(persistence.flushedCommits.load(ordering: .relaxed) == 1)
        // Only that commit: the connection is back to NORMAL for the next.
        #expect(try synchronous() == 1)

        var acknowledged = LocalCollectionChange()
        acknowledged.outboxRemovals = [entry.id]
        acknowledged.upserts = [document("a", ["n": 2], version: 5)]
        try persistence.apply(acknowledged)
        #expect(persistence.flushedCommits.load(ordering: .relaxed) == 1)
        #expect(try persistence.load()?.outbox.nextSequence == 2)
    }

    @Test("acknowledged entries leave; the next sequence never goes back, even when the outbox empties")
    func sequenceNeverGoesBack() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "k", directory: directory.url)
        var state = try persistence.create(clientID: "c")
        let entry = state.outbox.enqueue(.delete(try DocumentPath("products/a"))).entry
        var change = LocalCollectionChange()
        change.outboxPuts = [entry]
        change.nextSequence = state.outbox.nextSequence
        try persistence.apply(change)

        var ack = LocalCollectionChange()
        ack.outboxRemovals = [entry.id]
        ack.nextSequence = 1  // a stale value must not lower it
        try persistence.apply(ack)
        var loaded = try #require(try persistence.load())
        #expect(loaded.outbox.isEmpty)
        #expect(loaded.outbox.enqueue(.delete(try DocumentPath("products/b"))).entry.id.sequence == 2)
    }

    @Test("a local write leaves the stored next sequence to its outbox entry, which loading counts; entries leaving (the highest, or all) keep it in engine_state first")
    func sequenceKeptByEntries() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "k", directory: directory.url)
        var state = try persistence.create(clientID: "c")
        func stored() throws -> Int? {
            try persistence.pool.read { try Int.fetchOne($0, sql: "SELECT next_sequence FROM engine_state WHERE manager_key = 'k'") }
        }
        var entries: [PendingWrite] = []
        for name in ["a", "b", "c"] {
            let entry = state.outbox.enqueue(.delete(try DocumentPath("products/\(name)"))).entry
            var change = LocalCollectionChange()
            change.outboxPuts = [entry]
            change.nextSequence = state.outbox.nextSequence
            try persistence.apply(change)
            entries.append(entry)
        }
        #expect(try stored() == 1, "the puts alone wrote no second row")
        // As after a crash: what is loaded never hands out a sequence an entry holds.
        #expect(try persistence.load()?.outbox.nextSequence == 4)

        // The highest entry leaves first (answers may settle out of order): its sequence stays used.
        var ack = LocalCollectionChange()
        ack.outboxRemovals = [entries[2].id]
        try persistence.apply(ack)
        #expect(try stored() == 4)
        ack.outboxRemovals = [entries[0].id, entries[1].id]
        try persistence.apply(ack)
        var loaded = try #require(try persistence.load())
        #expect(loaded.outbox.isEmpty)
        #expect(loaded.outbox.enqueue(.delete(try DocumentPath("products/d"))).entry.id.sequence == 4)

        // A batch's puts reach its next sequence too; a change that moves the sequence past its
        // puts (or has none) writes it.
        var change = LocalCollectionChange()
        change.nextSequence = 9
        try persistence.apply(change)
        #expect(try stored() == 9)
        #expect(try persistence.load()?.outbox.nextSequence == 9)
    }

    @Test("deletions, full reloads and clear; manager keys are isolated in one file")
    func deletionsAndIsolation() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let products = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        let reviews = try SQLiteCollectionPersistence(managerKey: "reviews", directory: directory.url)
        _ = try products.create(clientID: "p")
        _ = try reviews.create(clientID: "r")
        var change = LocalCollectionChange()
        change.upserts = [document("a", [:]), document("b", [:]), document("c", [:])]
        try products.apply(change)
        try reviews.apply(change)

        var delete = LocalCollectionChange()
        delete.deletions = [try DocumentPath("products/b")]
        try products.apply(delete)
        #expect(try products.load()?.documents.map(\.path.id).sorted() == ["a", "c"])

        var reload = LocalCollectionChange()
        reload.replacesAllDocuments = true
        reload.upserts = [document("z", ["fresh": true])]
        try products.apply(reload)
        #expect(try products.load()?.documents.map(\.path.id) == ["z"])
        #expect(try reviews.load()?.documents.count == 3)

        try products.clear()
        #expect(try products.load() == nil)
        #expect(try reviews.load()?.outbox.clientID == "r")
    }

    @Test("the in-memory apply matches the database's")
    func inMemoryApplyAgrees() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "k", directory: directory.url)
        var memory = try persistence.create(clientID: "c")
        var changes: [LocalCollectionChange] = []
        var outbox = memory.outbox
        for step in 0..<20 {
            var change = LocalCollectionChange()
            change.upserts = [document("d\(step % 7)", ["step": .int(step)], version: Version(UInt64(step)))]
            if step % 3 == 0 { change.deletions = [try DocumentPath("products/d\((step + 2) % 7)")] }
            let entry = outbox.enqueue(.update(try DocumentPath("products/d\(step % 5)"), fields: ["s": .int(step)])).entry
            change.outboxPuts = [entry]
            if step % 4 == 3, let first = outbox.first {
                change.outboxRemovals = [first.id]
                outbox.remove(first.id)
            }
            change.nextSequence = outbox.nextSequence
            changes.append(change)
        }
        for change in changes {
            try persistence.apply(change)
            memory.apply(change)
        }
        let loaded = try #require(try persistence.load())
        #expect(loaded.documents.sorted { $0.path < $1.path } == memory.documents)
        #expect(loaded.outbox == memory.outbox)
    }
}
