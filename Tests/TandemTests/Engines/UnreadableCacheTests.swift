import Foundation
import GRDB
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// An engine whose saved state cannot be read when it is made.
@Suite("Unreadable cache", .timeLimit(.minutes(5)))
struct UnreadableCacheTests {
    /// The outbox and engine rows of `key`, as stored.
    static func stored(_ pool: DatabasePool, _ key: String) throws -> (rows: [String], clientID: String?, next: Int?) {
        try pool.read { db in
            let rows = try String.fetchAll(db, sql: "SELECT sequence || ':' || mutation FROM outbox WHERE manager_key = ? ORDER BY sequence", arguments: [key])
            let state = try Row.fetchOne(db, sql: "SELECT client_id, next_sequence FROM engine_state WHERE manager_key = ?", arguments: [key])
            return (rows, state?["client_id"], state?["next_sequence"])
        }
    }

    @Test("a queued write that cannot be read: the engine opens empty and logs why, refuses writes (they would take the stored writer's sequence numbers and overwrite its queue), leaves what is stored as it is, and still listens; once cleared, writes are queued again")
    func damagedOutboxRow() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        remote.store.goOffline()
        do {
            let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products",
                                                       persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
            try await engine.saveDocument(Product(id: "cup", name: "Cup", price: 5, stock: 1))
            try await engine.saveDocument(Product(id: "jug", name: "Jug", price: 7, stock: 1))
            #expect(engine.pendingWrites.count == 2)
        }
        let pool = try SQLiteCollectionPersistence.sharedPool(at: directory.url.appendingPathComponent("collections.sqlite").path)
        try await pool.write { db in try db.execute(sql: "UPDATE outbox SET mutation = '{\"broken' WHERE manager_key = 'products' AND sequence = 2") }
        let before = try Self.stored(pool, "products")
        #expect(before.rows.count == 2)

        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products",
                                                   persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url), logger: logger)
        let logged = try #require(logger.events(named: "products_persistence_fail").first)
        #expect("\(logged.parameters["error_description"] ?? "")".contains("damaged"))
        #expect(engine.pendingWrites.isEmpty)
        do {
            try await engine.saveDocument(Product(id: "vase", name: "Vase", price: 30, stock: 1))
            Issue.record("a write was accepted that could not be queued on disk")
        } catch let error as TandemError {
            #expect(error.code == .failedPrecondition)
            #expect(error.message.contains("could not be read") && error.message.contains("clear"))
        }
        await #expect(throws: TandemError.self) {
            try await engine.commit { batch in batch.save(Product(id: "bowl", name: "Bowl", price: 9, stock: 1)) }
        }
        #expect(engine.getDocument(id: "vase") == nil && engine.getDocument(id: "bowl") == nil && engine.pendingWrites.isEmpty, "rolled back from the view")
        let after = try Self.stored(pool, "products")
        #expect(after.rows == before.rows && after.clientID == before.clientID && after.next == before.next, "nothing stored was touched")

        // Server state still reaches it, in memory.
        remote.store.goOnline()
        await engine.startListening()
        #expect(await engine.waitUntil { engine.currentCollection.count == Product.mocks.count })
        engine.stopListening(clearCaches: false)

        // Cleared, the cache takes writes again, under a new writer id.
        try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url).clear()
        let again = CollectionSyncEngine<Product>(remote: remote, managerKey: "products",
                                                  persistence: try SQLiteCollectionPersistence(managerKey: "products", directory: directory.url))
        try await again.saveDocument(Product(id: "mug", name: "Mug", price: 4, stock: 1))
        #expect(remote.store.documents[try DocumentPath("products/mug")] != nil)
    }
}
