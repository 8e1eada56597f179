import Foundation
import GRDB
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// Large snapshots arrive in pieces: the engine decodes each piece's models and stages its documents
/// in the SQLite cache as it comes, and applies the snapshot only at its last piece.
@Suite("Snapshots in pieces", .timeLimit(.minutes(5)))
struct SnapshotPiecesTests {
    func id(_ index: Int) -> String { "p-\(String(1000 + index).dropFirst())" }

    func document(_ index: Int, price: Double, version: Version) -> Document {
        Document(path: try! DocumentPath("products/\(id(index))"), data: ["name": .string("P\(index)"), "price": .double(price), "stock": 1],
                 version: version, createTime: Date(timeIntervalSince1970: 10))
    }

    func piece(_ range: Range<Int>, continues: Bool, price: Double = 1, version: Version = 1) -> RemoteChangeBatch {
        var batch = RemoteChangeBatch(isSnapshot: true, changes: range.map { .upsert(document($0, price: price, version: version)) }, version: version)
        batch.continues = continues
        return batch
    }

    func rows(_ persistence: SQLiteCollectionPersistence, slot: Int) throws -> Int {
        try persistence.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM document WHERE manager_key = ? AND slot = ?", arguments: [persistence.managerKey, slot]) ?? 0
        }
    }

    func slot(_ persistence: SQLiteCollectionPersistence) throws -> Int? {
        try persistence.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT document_slot FROM engine_state WHERE manager_key = ?", arguments: [persistence.managerKey])
        }
    }

    @Test("a snapshot in pieces is staged in the cache's other slot and swapped in whole; the next one swaps back")
    func stagedAndSwapped() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        let engine = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collectionPath: { "products" }), managerKey: "products", persistence: persistence)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: RemoteChangeBatch.self)
        continuation.yield(piece(0..<100, continues: true))
        continuation.yield(piece(100..<200, continues: true))
        continuation.yield(piece(200..<250, continues: false))
        await engine.core.startListener { _ in stream }

        #expect(engine.currentCollection.map(\.id) == (0..<250).map(id))
        #expect(engine.getDocument(id: id(120))?.price == 1)
        var loaded = try #require(try persistence.load())
        #expect(loaded.documents.map(\.path.id) == (0..<250).map(id))
        #expect(loaded.resumeVersion == 1)
        #expect(try slot(persistence) == 1)
        #expect(try rows(persistence, slot: 0) == 0)

        // A new snapshot (after a reset, say) with ten documents gone and the rest changed.
        continuation.yield(piece(0..<100, continues: true, price: 2, version: 7))
        continuation.yield(piece(100..<240, continues: false, price: 2, version: 7))
        #expect(await engine.waitUntil { engine.currentCollection.count == 240 })
        #expect(engine.currentCollection.allSatisfy { $0.price == 2 })
        loaded = try #require(try persistence.load())
        #expect(loaded.documents.count == 240 && loaded.documents.allSatisfy { $0.data["price"] == .double(2) && $0.version == 7 })
        #expect(loaded.resumeVersion == 7)
        #expect(try slot(persistence) == 0)
        #expect(try rows(persistence, slot: 1) == 0)
        continuation.finish()
    }

    @Test("a pending write stays on top of a document that arrives in a piece")
    func pendingWriteOnTop() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collectionPath: { "products" })
        remote.store.goOffline()
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: persistence)
        try await engine.updateDocument(id: id(150), data: ["name": "Renamed offline"])
        #expect(engine.hasPendingWrites)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: RemoteChangeBatch.self)
        continuation.yield(piece(0..<100, continues: true))
        continuation.yield(piece(100..<200, continues: false))
        await engine.core.startListener { _ in stream }

        // The piece's model of that document was decoded before the write's effect was known.
        #expect(engine.getDocument(id: id(150))?.name == "Renamed offline")
        #expect(engine.metadata(id: id(150)).hasPendingWrites)
        #expect(engine.getDocument(id: id(149))?.name == "P149")
        #expect(engine.currentCollection.count == 200)
        #expect(try persistence.load()?.documents.first { $0.path.id == id(150) }?.data["name"] == "P150")
        continuation.finish()
    }

    @Test("when another snapshot took the staging slot, the batch is written whole instead")
    func supersededStaging() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        let engine = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collectionPath: { "products" }), managerKey: "products", persistence: persistence)
        let first = piece(0..<100, continues: true)
        let last = piece(100..<150, continues: false)
        var prepared = SyncCore<Product>.PreparedBatch(snapshot: true, staging: persistence)
        prepared.add(first)
        persistence.stage([.upsert(document(999, price: 9, version: 1))], snapshot: SnapshotIDs.next(), startsSnapshot: true)
        prepared.add(last)
        engine.core.applyNow(RemoteChangeBatch(isSnapshot: true, changes: first.changes + last.changes, version: 1), prepared: prepared)

        #expect(engine.currentCollection.count == 150)
        let loaded = try #require(try persistence.load())
        #expect(loaded.documents.map(\.path.id) == (0..<150).map(id))
        #expect(loaded.resumeVersion == 1)
    }
}

@Suite("SQLiteCollectionPersistence staging")
struct SQLiteCollectionStagingTests {
    func document(_ id: String, version: Version = 1) -> Document {
        Document(path: try! DocumentPath("products/\(id)"), data: ["name": .string(id)], version: version, createTime: Date(timeIntervalSince1970: 10))
    }

    func promotion(of snapshot: Int, _ upserts: [Document], version: Version) -> LocalCollectionChange {
        var change = LocalCollectionChange()
        change.replacesAllDocuments = true
        change.promotesStagedSnapshot = snapshot
        change.upserts = upserts
        change.resumeVersion = version
        return change
    }

    func ids(_ persistence: SQLiteCollectionPersistence) throws -> [String] {
        try persistence.load()?.documents.map(\.path.id) ?? []
    }

    @Test("staged documents stay out of the cache until their snapshot is swapped in; only the latest snapshot may be")
    func stagingRules() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url)
        _ = try persistence.create(clientID: "c")
        var change = LocalCollectionChange()
        change.upserts = [document("a"), document("b")]
        try persistence.apply(change)

        let one = SnapshotIDs.next()
        var sent = RemoteChange.upsert(document("c", version: 5))
        sent.encodedData = #"{"name":"c as sent"}"#
        persistence.stage([sent, .upsert(document("d", version: 5)), .removal(try DocumentPath("products/x"), version: 5)], snapshot: one, startsSnapshot: true)
        #expect(try ids(persistence) == ["a", "b"])
        try persistence.apply(promotion(of: one, [document("e", version: 5)], version: 5))
        #expect(try ids(persistence) == ["c", "d", "e"])
        #expect(try persistence.load()?.documents.first?.data == ["name": "c as sent"])
        #expect(try persistence.load()?.resumeVersion == 5)

        // Snapshot two is superseded by three: its late piece is dropped and it cannot be swapped in.
        let two = SnapshotIDs.next(), three = SnapshotIDs.next()
        persistence.stage([.upsert(document("f", version: 6))], snapshot: two, startsSnapshot: true)
        persistence.stage([.upsert(document("g", version: 7))], snapshot: three, startsSnapshot: true)
        persistence.stage([.upsert(document("h", version: 6))], snapshot: two, startsSnapshot: false)
        #expect(throws: TandemError.self) { try persistence.apply(promotion(of: two, [], version: 6)) }
        #expect(try ids(persistence) == ["c", "d", "e"])
        try persistence.apply(promotion(of: three, [], version: 7))
        #expect(try ids(persistence) == ["g"])

        // Clearing drops whatever was staged.
        let four = SnapshotIDs.next()
        persistence.stage([.upsert(document("i", version: 8))], snapshot: four, startsSnapshot: true)
        try persistence.clear()
        _ = try persistence.create(clientID: "c")
        #expect(throws: TandemError.self) { try persistence.apply(promotion(of: four, [], version: 8)) }
        #expect(try ids(persistence) == [])
    }

    @Test("a cache written before slots existed opens with its documents")
    func migratesFromOneSlot() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let pool = try DatabasePool(path: directory.url.appendingPathComponent("old.sqlite").path)
        try SQLiteCollectionPersistence.migrator.migrate(pool, upTo: "v1")
        try pool.write { db in
            try db.execute(sql: "INSERT INTO engine_state (manager_key, client_id, next_sequence, resume_version) VALUES ('products', 'c', 3, 9)")
            try db.execute(sql: """
                INSERT INTO document (manager_key, path, data, version, create_time, update_time)
                VALUES ('products', 'products/a', '{"name":"a"}', 9, 10, 10), ('products', 'products/b', '{"name":"b"}', 8, 10, 10)
                """)
        }
        let persistence = try SQLiteCollectionPersistence(managerKey: "products", pool: pool)
        let loaded = try #require(try persistence.load())
        #expect(loaded.documents.map(\.path.id) == ["a", "b"])
        #expect(loaded.documents.map(\.version) == [9, 8])
        #expect(loaded.resumeVersion == 9)
        #expect(loaded.outbox.nextSequence == 3)
    }
}
