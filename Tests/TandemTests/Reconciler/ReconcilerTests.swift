import Foundation
import GRDB
import Testing
import TandemCore
@testable import Tandem

struct StudioDTO: RemoteStampedDTO {
    var id: String
    var name: String
    var updatedAt: Date
    var city = "Oslo"
    var rooms: [ItemDTO] = []
    var equipment: [ItemDTO] = []
    /// A tombstone the server sends.
    var deletedAt: Date?
}

/// A child's DTO: a room, a piece of equipment, a seat of a room.
struct ItemDTO: RemoteStampedDTO {
    var id: String
    var title: String
    var updatedAt: Date
    var seats: [ItemDTO] = []
}

struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable, Equatable {
    var id: Int64?
    var remoteId: String
    var name: String
    var city: String
    var updatedAt: Date
    var deletedAt: Date?

    init(dto: StudioDTO) {
        remoteId = dto.id
        name = dto.name
        city = dto.city
        updatedAt = dto.updatedAt
    }

    mutating func apply(_ dto: StudioDTO) throws {
        if dto.name == "explode" { throw TandemError(.invalidArgument, "no such name") }
        name = dto.name
        city = dto.city
        if let deletedAt = dto.deletedAt { self.deletedAt = deletedAt }
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A record without `deletedAt`.
struct Tag: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel {
    var id: Int64?
    var remoteId: String
    var name: String
    var updatedAt: Date
    init(dto: StudioDTO) {
        remoteId = dto.id
        name = dto.name
        updatedAt = dto.updatedAt
    }
    mutating func apply(_ dto: StudioDTO) { name = dto.name }
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

@Suite("Reconciler")
struct ReconcilerTests {
    let t0 = Date(timeIntervalSince1970: 1_000)
    let t1 = Date(timeIntervalSince1970: 2_000)
    let t2 = Date(timeIntervalSince1970: 3_000)

    func database() throws -> (DatabaseQueue, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let queue = try DatabaseQueue(path: directory.url.appendingPathComponent("app.sqlite").path)
        try queue.write { db in
            try db.create(table: "studio") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("name", .text).notNull()
                table.column("city", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
            }
            try db.create(table: "tag") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("name", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
            }
            try db.create(table: "room") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
                table.column("studioId", .integer).notNull().indexed().references("studio", onDelete: .cascade)
            }
            try db.create(table: "equipment") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("studioId", .integer).notNull().indexed().references("studio", onDelete: .cascade)
            }
            try db.create(table: "seat") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("title", .text).notNull().check { length($0) > 0 }
                table.column("updatedAt", .datetime).notNull()
                table.column("roomRemoteId", .text).notNull().indexed()
            }
        }
        return (queue, directory)
    }

    func studios(_ queue: DatabaseQueue) throws -> [Studio] {
        try queue.read { db in try Studio.order(Column("remoteId")).fetchAll(db) }
    }

    @Test("a full slice with hard delete: two rows, then a payload of one renamed row, leaves one row, renamed")
    func fullSliceHardDelete() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let first = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0), StudioDTO(id: "b", name: "B", updatedAt: t0)], deletionPolicy: .hardDeleteMissing)
        #expect(first.inserted == 2 && first.touchedIDs == ["a", "b"])
        let second = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A2", updatedAt: t1)], deletionPolicy: .hardDeleteMissing)
        #expect(try studios(queue).map(\.name) == ["A2"])
        #expect(second.updated == 1 && second.deleted == 1 && second.touchedIDs == ["a"])
    }

    @Test("policy none keeps rows the payload does not list")
    func policyNone() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0), StudioDTO(id: "b", name: "B", updatedAt: t0)])
        let summary = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A2", updatedAt: t1)], deletionPolicy: .none)
        #expect(try studios(queue).map(\.name) == ["A2", "B"])
        #expect(summary.deleted == 0 && summary.softDeleted == 0)
    }

    @Test("an older stamp never overwrites; an equal one changes nothing but counts as seen")
    func stamps() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t1), StudioDTO(id: "b", name: "B", updatedAt: t1)])
        let summary = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "old", updatedAt: t0), StudioDTO(id: "b", name: "same time", updatedAt: t1)],
                                                            deletionPolicy: .hardDeleteMissing)
        #expect(try studios(queue).map(\.name) == ["A", "B"])
        #expect(summary.unchanged == 2 && summary.deleted == 0 && summary.touchedIDs.isEmpty)
    }

    @Test("soft delete marks missing rows once, an empty payload deletes nothing, and a row that comes back newer is reactivated")
    func softDeleteAndReactivation() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0), StudioDTO(id: "b", name: "B", updatedAt: t0)])
        let empty = try await reconciler.upsertCollection(Studio.self, from: [], deletionPolicy: .softDeleteMissing)
        #expect(empty == ReconcileSummary())
        #expect(try studios(queue).allSatisfy { $0.deletedAt == nil })

        let marked = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0)], deletionPolicy: .softDeleteMissing, now: t1)
        #expect(marked.softDeleted == 1 && marked.unchanged == 1)
        #expect(try studios(queue).map(\.deletedAt) == [nil, t1])
        // Still missing: the tombstone stays as it was.
        let again = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0)], deletionPolicy: .softDeleteMissing, now: t2)
        #expect(again.softDeleted == 0)
        #expect(try studios(queue).map(\.deletedAt) == [nil, t1])
        // Back with a newer stamp: reactivated, its fields applied.
        let back = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0), StudioDTO(id: "b", name: "B2", updatedAt: t2)],
                                                         deletionPolicy: .softDeleteMissing)
        #expect(back.reactivated == 1 && back.updated == 0 && back.touchedIDs == ["b"])
        #expect(try studios(queue).map { "\($0.name):\($0.deletedAt == nil)" } == ["A:true", "B2:true"])
        // With the guard off, an empty payload marks every row.
        let all = try await reconciler.upsertCollection(Studio.self, from: [], deletionPolicy: .softDeleteMissing, requireNonEmptyFullSlice: false, now: t2)
        #expect(all.softDeleted == 2)
    }

    @Test("duplicate ids in one payload: the newest stamp wins, the last on a tie")
    func duplicates() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "newest", updatedAt: t2), StudioDTO(id: "a", name: "older", updatedAt: t1),
            StudioDTO(id: "b", name: "first", updatedAt: t1), StudioDTO(id: "b", name: "last", updatedAt: t1),
        ])
        #expect(try studios(queue).map(\.name) == ["newest", "last"])
        #expect(summary.inserted == 2 && summary.touchedIDs == ["a", "b"])
    }

    @Test("soft delete on a record without deletedAt deletes, and the summary says so; a scope limits what goes")
    func fallbackAndScope() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Tag.self, from: [StudioDTO(id: "x", name: "X", updatedAt: t0), StudioDTO(id: "y", name: "Y", updatedAt: t0)])
        let summary = try await reconciler.upsertCollection(Tag.self, from: [StudioDTO(id: "x", name: "X", updatedAt: t0)], deletionPolicy: .softDeleteMissing)
        #expect(summary.fellBackToHardDelete && summary.deleted == 1)
        let tags = try await queue.read { db in try Tag.fetchCount(db) }
        #expect(tags == 1)

        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0, city: "Oslo"), StudioDTO(id: "b", name: "B", updatedAt: t0, city: "Rome")])
        let scoped = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "c", name: "C", updatedAt: t0, city: "Rome")], deletionPolicy: .hardDeleteMissing,
                                                           scope: Studio.filter(Column("city") == "Rome"))
        #expect(scoped.deleted == 1 && scoped.inserted == 1)
        #expect(try studios(queue).map(\.remoteId) == ["a", "c"])
    }

    @Test("a throwing apply rolls everything back: the database is exactly as it was")
    func rollback() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0), StudioDTO(id: "b", name: "B", updatedAt: t0)])
        func dump() throws -> String {
            try queue.read { db in
                try ["studio", "tag", "room", "equipment", "seat"].map { try Row.fetchAll(db, sql: "SELECT * FROM \($0) ORDER BY id").description }.joined(separator: "\n")
            }
        }
        let before = try dump()
        let error = await #expect(throws: ReconcileError.self) {
            try await reconciler.upsertCollection(Studio.self, from: [
                StudioDTO(id: "new", name: "N", updatedAt: t1), StudioDTO(id: "a", name: "A2", updatedAt: t1), StudioDTO(id: "b", name: "explode", updatedAt: t1),
            ], deletionPolicy: .hardDeleteMissing)
        }
        #expect(error?.table == "studio" && error?.remoteId == "b" && error?.step == .apply)
        #expect((error?.underlying as? TandemError)?.code == .invalidArgument)
        #expect(try dump() == before)
    }

    @Test("ids are looked up in chunks of 500: a payload of many chunks works")
    func manyIDs() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let dtos = (0..<2_500).map { StudioDTO(id: "s\($0)", name: "n", updatedAt: t0) }
        #expect(try await reconciler.upsertCollection(Studio.self, from: dtos).inserted == 2_500)
        let next = dtos.enumerated().filter { $0.offset % 10 != 0 }.map { StudioDTO(id: $0.element.id, name: $0.offset % 3 == 0 ? "m" : "n", updatedAt: $0.offset % 3 == 0 ? t1 : t0) }
        let summary = try await reconciler.upsertCollection(Studio.self, from: next, deletionPolicy: .softDeleteMissing, now: t2)
        #expect(summary.softDeleted == 250)
        #expect(summary.updated + summary.unchanged == 2_250)
        #expect(summary.updated == next.filter { $0.name == "m" }.count)
    }
}
