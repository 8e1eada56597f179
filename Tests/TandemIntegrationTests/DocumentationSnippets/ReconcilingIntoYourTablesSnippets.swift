import Foundation
import GRDB
import Tandem

/// The code of the reconciler article (`Sources/Tandem/Tandem.docc/ReconcilingIntoYourTables.md`):
/// compiled, not run.
enum ReconcilingIntoYourTablesSnippets {
    // snippet: reconciling-dtos
    struct StudioDTO: RemoteStampedDTO { var id: String; var name: String; var updatedAt: Date; var rooms: [RoomDTO] }
    struct RoomDTO: RemoteStampedDTO { var id: String; var title: String; var updatedAt: Date }
    // end snippet

    // snippet: reconciling-records
    struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable {
        var id: Int64?
        var remoteId: String        // unique: rows are looked up, and missing ones deleted, by it
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
    // end snippet

    static func schema(dbQueue: DatabaseQueue) async throws {
        // snippet: reconciling-schema
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
        // end snippet
    }

    static func upsert(dtos: [StudioDTO], dbQueue: DatabaseQueue) async throws {
        // snippet: reconciling-upsert
        let summary = try await Reconciler(writer: dbQueue).upsertCollection(Studio.self, from: dtos, deletionPolicy: .softDeleteMissing)
        print(summary.inserted, summary.updated, summary.unchanged, summary.softDeleted, summary.reactivated)
        // end snippet
    }

    static func scoped(northDTOs: [StudioDTO], page: [StudioDTO], reconciler: Reconciler) async throws {
        // snippet: reconciling-scope
        // The full list of one region's studios: only that region's rows can go missing.
        try await reconciler.upsertCollection(Studio.self, from: northDTOs, deletionPolicy: .hardDeleteMissing,
                                              scope: Studio.filter(Column("region") == "north"))
        // One page of a longer list: nothing is missing from a page.
        try await reconciler.upsertCollection(Studio.self, from: page, deletionPolicy: .none)
        // end snippet
    }

    static func children(dtos: [StudioDTO], dbQueue: DatabaseQueue) async throws {
        // snippet: reconciling-children
        let rooms = ChildSyncTask<StudioDTO, Studio, Room>(
            extract: { $0.rooms },
            parentColumn: Column("studioId"),                 // the parent's children: rows whose studioId…
            parentKey: { $0.id },                             // …equals this
            link: { room, studio in room.studioId = studio.id },
            deletionPolicy: .hardDeleteMissing)               // a studio's rooms its DTO no longer lists go

        let summary = try await Reconciler(writer: dbQueue).upsertCollection(
            Studio.self, from: dtos, deletionPolicy: .softDeleteMissing, childTasks: [AnyChildTask(rooms)])
        print(summary.children["room"]?.inserted ?? 0, summary.children["room"]?.deleted ?? 0)
        // end snippet
    }

    static func failures(dtos: [StudioDTO], reconciler: Reconciler) async throws {
        // snippet: reconciling-errors
        do {
            try await reconciler.upsertCollection(Studio.self, from: dtos, deletionPolicy: .softDeleteMissing)
        } catch let error as ReconcileError {
            print(error.table, error.remoteId ?? "-", error.step, error.underlying)   // nothing of the run was written
        }
        // end snippet
    }

    static func ownTransaction(dtos: [StudioDTO], dbQueue: DatabaseQueue) async throws {
        // snippet: reconciling-transaction
        let summary = try await dbQueue.write { db in
            let studios = try Reconciler.reconcile(Studio.self, dtos, in: db, deletionPolicy: .softDeleteMissing)
            // …more writes of yours, committed with it
            return studios
        }
        // end snippet
        _ = summary
    }

    struct StudioDocument: SyncModel {
        var id: String
        var name: String
        var updatedAt: Date
    }

    static func feed(studios: CollectionSyncEngine<StudioDocument>, dbQueue: DatabaseQueue) {
        // snippet: reconciling-feed
        let feed = studios.reconcile(into: Reconciler(writer: dbQueue), as: Studio.self, deletionPolicy: .softDeleteMissing) {
            StudioDTO(id: $0.id, name: $0.name, updatedAt: $0.updatedAt, rooms: [])
        }
        Task { for try await summary in feed { print("mirrored", summary.touchedIDs) } }
        // end snippet
    }
}
