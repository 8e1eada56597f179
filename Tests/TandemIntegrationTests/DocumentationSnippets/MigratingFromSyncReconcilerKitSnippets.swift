import Foundation
import GRDB
import Tandem
import TandemCore

/// The code of the article "Migrating from SyncReconcilerKit" (MigratingFromSyncReconcilerKit.md).
enum MigratingFromSyncReconcilerKitSnippets {
    // snippet: reconciler-models
    struct StudioDTO: RemoteStampedDTO {
        let id: String
        let name: String
        let updatedAt: Date
        let rooms: [RoomDTO]
    }

    struct RoomDTO: RemoteStampedDTO {
        let id: String
        let title: String
        let updatedAt: Date
    }

    struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable {
        var id: Int64?
        var remoteId: String          // unique: rows are looked up, and missing ones deleted, by it
        var name: String
        var updatedAt: Date
        var deletedAt: Date?          // for .softDeleteMissing

        init(dto: StudioDTO) { remoteId = dto.id; name = dto.name; updatedAt = dto.updatedAt }
        mutating func apply(_ dto: StudioDTO) { name = dto.name }
        mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
    }

    struct Room: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel {
        var id: Int64?
        var remoteId: String
        var title: String
        var updatedAt: Date
        var studioId: Int64?          // the parent's row id; a foreign key with onDelete: .cascade

        init(dto: RoomDTO) { remoteId = dto.id; title = dto.title; updatedAt = dto.updatedAt }
        mutating func apply(_ dto: RoomDTO) { title = dto.title }
    }
    // end snippet

    static func run(dtos: [StudioDTO], dbQueue: DatabaseQueue) async throws {
        // snippet: reconciler-after
        let roomsTask = ChildSyncTask<StudioDTO, Studio, Room>(
            extract: { $0.rooms },
            parentColumn: Column("studioId"),          // a studio's rooms: rows whose studioId…
            parentKey: { $0.id },                      // …is the studio's row id
            link: { room, studio in room.studioId = studio.id },
            deletionPolicy: .hardDeleteMissing
        )

        let reconciler = Reconciler(writer: dbQueue)
        let summary = try await reconciler.upsertCollection(
            Studio.self,
            from: dtos,
            deletionPolicy: .softDeleteMissing,
            childTasks: [AnyChildTask(roomsTask)],
            requireNonEmptyFullSlice: true
        )
        print(summary.inserted, summary.updated, summary.softDeleted, summary.reactivated)
        print(summary.children["room"]?.deleted ?? 0)
        // end snippet
    }

    static func schema(dbQueue: DatabaseQueue) throws {
        // snippet: reconciler-schema
        var migrator = DatabaseMigrator()
        migrator.registerMigration("studios") { db in
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
        try migrator.migrate(dbQueue)
        // end snippet
    }

    // snippet: reconciler-feed-model
    struct StudioDocument: SyncModel {
        let id: String
        var name: String
        var updatedAt: Date
    }
    // end snippet

    static func feed(studios: CollectionSyncEngine<StudioDocument>, dbQueue: DatabaseQueue) {
        // snippet: reconciler-feed
        let feed = studios.reconcile(into: Reconciler(writer: dbQueue), as: Studio.self, deletionPolicy: .softDeleteMissing) {
            StudioDTO(id: $0.id, name: $0.name, updatedAt: $0.updatedAt, rooms: [])
        }
        Task {
            for try await summary in feed { print("mirrored", summary.touchedIDs) }
        }
        // end snippet
    }
}
