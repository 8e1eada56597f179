import Foundation
import GRDB
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// A document of the engine that is its own DTO.
struct Track: SyncModel, RemoteStampedDTO, Equatable {
    var id: String
    var title: String
    var updatedAt: Date
}

/// The app's row for a track.
struct TrackRow: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable {
    static let databaseTableName = "trackRow"
    var id: Int64?
    var remoteId: String
    var title: String
    var updatedAt: Date
    var deletedAt: Date?
    init(dto: Track) {
        remoteId = dto.id
        title = dto.title
        updatedAt = dto.updatedAt
    }
    mutating func apply(_ dto: Track) { title = dto.title }
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

@Suite("Reconcile feed", .timeLimit(.minutes(5)))
struct ReconcileFeedTests {
    @Test("a collection engine on a live server feeds an app table: the first state, a server change, a local write and a removal")
    func engineFeedsTable() async throws {
        let server = try await LiveServer.start()
        let collection = try CollectionPath("tracks")
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        _ = try await server.store.commit([
            .set(try collection.document("a"), try JSONValueEncoder().encodeObject(Track(id: "a", title: "Intro", updatedAt: t0))),
            .set(try collection.document("b"), try JSONValueEncoder().encodeObject(Track(id: "b", title: "Outro", updatedAt: t0))),
        ])
        let client = TandemClient(url: server.url)
        let running = Task { try await client.run() }
        let engine = CollectionSyncEngine<Track>(remote: TandemRemoteCollectionService(client: client, collection: collection),
                                                 managerKey: "tracks", persistence: nil)
        await engine.startListening()

        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try DatabaseQueue(path: directory.url.appendingPathComponent("app.sqlite").path)
        try await queue.write { db in
            try db.create(table: "trackRow") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
            }
        }
        func table() throws -> [String] {
            try queue.read { db in
                try TrackRow.order(Column("remoteId")).fetchAll(db).map { "\($0.remoteId):\($0.title)\($0.deletedAt == nil ? "" : ":gone")" }
            }
        }
        var feed = engine.reconcile(into: Reconciler(writer: queue), as: TrackRow.self, deletionPolicy: .softDeleteMissing).makeAsyncIterator()
        /// Reads summaries until the table shows `expected`; returns their sum.
        func summaries(until expected: [String]) async throws -> ReconcileSummary {
            var total = ReconcileSummary()
            while try table() != expected {
                total.add(try #require(try await feed.next()))
            }
            return total
        }

        #expect(try await summaries(until: ["a:Intro", "b:Outro"]).inserted == 2)
        // From the server.
        _ = try await server.store.commit([.set(try collection.document("a"), try JSONValueEncoder().encodeObject(Track(id: "a", title: "Overture", updatedAt: t0 + 60)))])
        #expect(try await summaries(until: ["a:Overture", "b:Outro"]).updated == 1)
        // From this engine, shown before the server acknowledges it.
        try await engine.saveDocument(Track(id: "c", title: "Encore", updatedAt: t0 + 120))
        #expect(try await summaries(until: ["a:Overture", "b:Outro", "c:Encore"]).inserted == 1)
        try await engine.deleteDocument(id: "b")
        #expect(try await summaries(until: ["a:Overture", "b:Outro:gone", "c:Encore"]).softDeleted == 1)
        // Down to none: the server's empty collection is a full slice too.
        try await engine.deleteDocument(id: "a")
        try await engine.deleteDocument(id: "c")
        #expect(try await summaries(until: ["a:Overture:gone", "b:Outro:gone", "c:Encore:gone"]).softDeleted == 2)

        running.cancel()
        _ = try? await running.value
        await server.stop()
    }

    @Test("documents turned into DTOs by a closure; a failing run ends the feed with its error and leaves the table as it was")
    func failureEndsFeed() async throws {
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        let remote = MockRemoteCollectionService(collection: [Product(id: "lamp", name: "Lamp", price: 30, stock: 3)], collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine.startListening()
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try DatabaseQueue(path: directory.url.appendingPathComponent("app.sqlite").path)
        try await queue.write { db in
            try db.create(table: "trackRow") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull().check { length($0) > 0 }
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
            }
        }
        var feed = engine.reconcile(into: Reconciler(writer: queue), as: TrackRow.self, deletionPolicy: .hardDeleteMissing) { product in
            Track(id: product.id, title: product.name, updatedAt: t0 + product.price)
        }.makeAsyncIterator()
        #expect(try await feed.next()?.touchedIDs == ["lamp"])
        try await engine.saveDocument(Product(id: "nameless", name: "", price: 1, stock: 1))
        await #expect(throws: ReconcileError.self) { while try await feed.next() != nil {} }
        let titles = try await queue.read { db in try TrackRow.fetchAll(db).map(\.title) }
        #expect(titles == ["Lamp"])
    }
}
