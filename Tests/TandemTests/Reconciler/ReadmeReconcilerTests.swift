import Foundation
import GRDB
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// The README's reconciler example, as written there.
enum ReadmeExample {
    struct StudioDTO: RemoteStampedDTO { var id: String; var name: String; var updatedAt: Date; var rooms: [RoomDTO] }
    struct RoomDTO: RemoteStampedDTO { var id: String; var title: String; var updatedAt: Date }

    struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable {
        var id: Int64?
        var remoteId: String        // indexed or unique: rows are looked up by it
        var name: String
        var updatedAt: Date
        var deletedAt: Date?        // SoftDeletable: .softDeleteMissing marks rather than deletes
        init(dto: StudioDTO) { remoteId = dto.id; name = dto.name; updatedAt = dto.updatedAt }
        mutating func apply(_ dto: StudioDTO) { name = dto.name }   // a throw rolls the whole run back
        mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
    }

    struct Room: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel {
        var id: Int64?
        var remoteId: String
        var title: String
        var updatedAt: Date
        var studioId: Int64?
        init(dto: RoomDTO) { remoteId = dto.id; title = dto.title; updatedAt = dto.updatedAt }
        mutating func apply(_ dto: RoomDTO) { title = dto.title }
    }

    /// The engine's documents in the feed example.
    struct StudioDocument: SyncModel {
        var id: String
        var name: String
        var updatedAt: Date
    }

    static func reconcile(_ dtos: [StudioDTO], into dbQueue: DatabaseQueue) async throws -> ReconcileSummary {
        let rooms = ChildSyncTask<StudioDTO, Studio, Room>(
            extract: { $0.rooms },
            parentColumn: Column("studioId"),                 // the parent's children: rows whose studioId…
            parentKey: { $0.id },                             // …equals this
            link: { room, studio in room.studioId = studio.id },
            deletionPolicy: .hardDeleteMissing)               // a studio's rooms its DTO no longer lists go

        let summary = try await Reconciler(writer: dbQueue).upsertCollection(
            Studio.self, from: dtos, deletionPolicy: .softDeleteMissing, childTasks: [AnyChildTask(rooms)])
        print(summary.touchedIDs, summary.inserted, summary.updated, summary.softDeleted, summary.children["room"]?.deleted ?? 0)
        return summary
    }

    static func feed(_ studios: CollectionSyncEngine<StudioDocument>, into dbQueue: DatabaseQueue) -> SyncStream<ReconcileSummary> {
        let feed = studios.reconcile(into: Reconciler(writer: dbQueue), as: Studio.self, deletionPolicy: .softDeleteMissing) {
            StudioDTO(id: $0.id, name: $0.name, updatedAt: $0.updatedAt, rooms: [])
        }
        return feed
    }
}

@Suite("README reconciler example", .timeLimit(.minutes(5)))
struct ReadmeReconcilerTests {
    @Test("the README's example runs as it says: studios soft-deleted, rooms hard-deleted per studio, and the engine feed")
    func example() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let dbQueue = try DatabaseQueue(path: directory.url.appendingPathComponent("app.sqlite").path)
        try await dbQueue.write { db in
            try db.create(table: "studio") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("name", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
            }
            try db.create(table: "room") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("studioId", .integer).notNull().indexed().references("studio", onDelete: .cascade)
            }
        }
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        typealias DTO = ReadmeExample.StudioDTO
        typealias RoomDTO = ReadmeExample.RoomDTO
        let first = try await ReadmeExample.reconcile([
            DTO(id: "a", name: "A", updatedAt: t0, rooms: [RoomDTO(id: "r1", title: "1", updatedAt: t0), RoomDTO(id: "r2", title: "2", updatedAt: t0)]),
            DTO(id: "b", name: "B", updatedAt: t0, rooms: []),
        ], into: dbQueue)
        #expect(first.inserted == 2 && first.children["room"]?.inserted == 2)
        let second = try await ReadmeExample.reconcile([
            DTO(id: "a", name: "A2", updatedAt: t0 + 1, rooms: [RoomDTO(id: "r1", title: "1", updatedAt: t0)]),
        ], into: dbQueue)
        #expect(second.updated == 1 && second.softDeleted == 1 && second.children["room"]?.deleted == 1)

        let studios = CollectionSyncEngine<ReadmeExample.StudioDocument>(
            remote: MockRemoteCollectionService(collection: [ReadmeExample.StudioDocument(id: "a", name: "A3", updatedAt: t0 + 2)], collectionPath: { "studios" }),
            managerKey: "studios", persistence: nil, clock: ManualClock())
        await studios.startListening()
        var feed = ReadmeExample.feed(studios, into: dbQueue).makeAsyncIterator()
        let mirrored = try #require(try await feed.next())
        #expect(mirrored.touchedIDs == ["a"])
        let names = try await dbQueue.read { db in try ReadmeExample.Studio.order(Column("remoteId")).fetchAll(db).map { "\($0.name):\($0.deletedAt == nil)" } }
        #expect(names == ["A3:true", "B:false"])
    }
}
