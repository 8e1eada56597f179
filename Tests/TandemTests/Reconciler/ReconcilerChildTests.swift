import Foundation
import GRDB
import Testing
import TandemCore
@testable import Tandem

/// A room of a studio: soft-deletable, linked by the studio's row id.
struct Room: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable, Equatable {
    var id: Int64?
    var remoteId: String
    var title: String
    var updatedAt: Date
    var deletedAt: Date?
    var studioId: Int64?
    init(dto: ItemDTO) {
        remoteId = dto.id
        title = dto.title
        updatedAt = dto.updatedAt
    }
    mutating func apply(_ dto: ItemDTO) { title = dto.title }
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A studio's equipment: hard-deleted only.
struct Equipment: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel, Equatable {
    var id: Int64?
    var remoteId: String
    var title: String
    var updatedAt: Date
    var studioId: Int64?
    init(dto: ItemDTO) {
        remoteId = dto.id
        title = dto.title
        updatedAt = dto.updatedAt
    }
    mutating func apply(_ dto: ItemDTO) { title = dto.title }
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A seat of a room (a child of a child), linked by the room's remote id.
struct Seat: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel, Equatable {
    var id: Int64?
    var remoteId: String
    var title: String
    var updatedAt: Date
    var roomRemoteId = ""
    init(dto: ItemDTO) {
        remoteId = dto.id
        title = dto.title
        updatedAt = dto.updatedAt
    }
    mutating func apply(_ dto: ItemDTO) { title = dto.title }
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

extension ReconcilerTests {
    func roomsTask(_ policy: DeletionPolicy, requireNonEmpty: Bool = true, seats: DeletionPolicy? = nil) -> AnyChildTask<Studio> {
        let seatTasks = seats.map { policy in
            [AnyChildTask(ChildSyncTask<ItemDTO, Room, Seat>(
                "seats", extract: \.seats, parentColumn: Column("roomRemoteId"), parentKey: { $0.remoteId },
                link: { seat, room in seat.roomRemoteId = room.remoteId }, deletionPolicy: policy))]
        } ?? []
        return AnyChildTask(ChildSyncTask<StudioDTO, Studio, Room>(
            "rooms", extract: \.rooms, parentColumn: Column("studioId"), parentKey: { $0.id },
            link: { room, studio in room.studioId = studio.id }, deletionPolicy: policy,
            requireNonEmptyChildSlice: requireNonEmpty, children: seatTasks))
    }

    func equipmentTask(_ policy: DeletionPolicy) -> AnyChildTask<Studio> {
        AnyChildTask(ChildSyncTask<StudioDTO, Studio, Equipment>(
            extract: \.equipment, parentColumn: Column("studioId"), parentKey: { $0.id },
            link: { item, studio in item.studioId = studio.id }, deletionPolicy: policy))
    }

    func rooms(_ queue: DatabaseQueue) throws -> [Room] {
        try queue.read { db in try Room.order(Column("remoteId")).fetchAll(db) }
    }

    @Test("children in two child collections with hard delete: the next payload drops the room and renames the equipment")
    func twoChildCollections() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.hardDeleteMissing, requireNonEmpty: false), equipmentTask(.hardDeleteMissing)]
        let first = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "s", name: "S", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "Room", updatedAt: t0)], equipment: [ItemDTO(id: "e", title: "Mic", updatedAt: t0)]),
        ], deletionPolicy: .hardDeleteMissing, childTasks: tasks)
        #expect(first.inserted == 1 && first.children["rooms"]?.inserted == 1 && first.children["equipment"]?.inserted == 1)

        // The studio's own stamp is unchanged: its children are reconciled all the same.
        let second = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "s", name: "S", updatedAt: t0, rooms: [], equipment: [ItemDTO(id: "e", title: "Microphone", updatedAt: t1)]),
        ], deletionPolicy: .hardDeleteMissing, childTasks: tasks)
        let studio = try #require(try studios(queue).first)
        #expect(try rooms(queue).isEmpty)
        let equipment = try await queue.read { db in try Equipment.fetchAll(db) }
        #expect(equipment.map(\.title) == ["Microphone"] && equipment.first?.studioId == studio.id)
        #expect(second.unchanged == 1)
        #expect(second.children["rooms"]?.deleted == 1)
        #expect(second.children["equipment"]?.updated == 1 && second.children["equipment"]?.touchedIDs == ["e"])
    }

    @Test("children are soft-deleted per parent; an empty child list keeps that parent's children")
    func childrenSoftDeletedPerParent() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.softDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "a1", title: "1", updatedAt: t0), ItemDTO(id: "a2", title: "2", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0, rooms: [ItemDTO(id: "b1", title: "1", updatedAt: t0)]),
            StudioDTO(id: "c", name: "C", updatedAt: t0, rooms: [ItemDTO(id: "c1", title: "1", updatedAt: t0)]),
        ], childTasks: tasks)
        // a drops a2; b lists no rooms (kept by the guard); c is not in the payload (policy none).
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "a1", title: "1", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0),
        ], childTasks: tasks, now: t2)
        #expect(try rooms(queue).map { "\($0.remoteId):\($0.deletedAt == nil ? "live" : "gone")" } == ["a1:live", "a2:gone", "b1:live", "c1:live"])
        #expect(try rooms(queue).first { $0.remoteId == "a2" }?.deletedAt == t2)
        #expect(summary.children["rooms"]?.softDeleted == 1 && summary.children["rooms"]?.unchanged == 1)

        // Without the guard, b's empty list tombstones b1.
        let unguarded = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "b", name: "B", updatedAt: t0)],
                                                              childTasks: [roomsTask(.softDeleteMissing, requireNonEmpty: false)])
        #expect(unguarded.children["rooms"]?.softDeleted == 1)
        #expect(try rooms(queue).filter { $0.deletedAt == nil }.map(\.remoteId) == ["a1", "c1"])
    }

    @Test("a parent and a child that come back with newer stamps are reactivated")
    func reactivationOfParentAndChild() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.softDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r1", title: "1", updatedAt: t0), ItemDTO(id: "r2", title: "2", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0),
        ], childTasks: tasks)
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r1", title: "1", updatedAt: t0)]),
        ], deletionPolicy: .softDeleteMissing, childTasks: tasks, now: t1)
        #expect(try studios(queue).map { $0.deletedAt != nil } == [false, true])
        #expect(try rooms(queue).map { $0.deletedAt != nil } == [false, true])

        let back = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r1", title: "1", updatedAt: t0), ItemDTO(id: "r2", title: "2 again", updatedAt: t2)]),
            StudioDTO(id: "b", name: "B again", updatedAt: t2),
        ], deletionPolicy: .softDeleteMissing, childTasks: tasks)
        #expect(back.reactivated == 1 && back.touchedIDs == ["b"])
        #expect(back.children["rooms"]?.reactivated == 1 && back.children["rooms"]?.touchedIDs == ["r2"])
        #expect(try studios(queue).map { "\($0.name):\($0.deletedAt == nil)" } == ["A:true", "B again:true"])
        #expect(try rooms(queue).map { "\($0.title):\($0.deletedAt == nil)" } == ["1:true", "2 again:true"])
    }

    @Test("children of children: seats reconcile per room, linked by the room's remote id, counted under the room task")
    func nestedChildren() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.hardDeleteMissing, seats: .hardDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "s", name: "S", updatedAt: t0, rooms: [
                ItemDTO(id: "r1", title: "1", updatedAt: t0, seats: [ItemDTO(id: "x", title: "x", updatedAt: t0), ItemDTO(id: "y", title: "y", updatedAt: t0)]),
                ItemDTO(id: "r2", title: "2", updatedAt: t0, seats: [ItemDTO(id: "z", title: "z", updatedAt: t0)]),
            ]),
        ], childTasks: tasks)
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "s", name: "S", updatedAt: t0, rooms: [
                ItemDTO(id: "r1", title: "1", updatedAt: t0, seats: [ItemDTO(id: "x", title: "x2", updatedAt: t1)]),
                ItemDTO(id: "r2", title: "2", updatedAt: t0, seats: [ItemDTO(id: "z", title: "z", updatedAt: t0), ItemDTO(id: "w", title: "w", updatedAt: t0)]),
            ]),
        ], childTasks: tasks)
        let seats = try await queue.read { db in try Seat.order(Column("remoteId")).fetchAll(db) }
        #expect(seats.map { "\($0.remoteId):\($0.title):\($0.roomRemoteId)" } == ["w:w:r2", "x:x2:r1", "z:z:r2"])
        let seatSummary = try #require(summary.children["rooms"]?.children["seats"])
        #expect(seatSummary.inserted == 1 && seatSummary.updated == 1 && seatSummary.unchanged == 1 && seatSummary.deleted == 1)
        #expect(seatSummary.touchedIDs == ["x", "w"])
    }

    @Test("a child listed under another parent moves there, even with an unchanged stamp; a duplicate child goes to the newest")
    func childMovesBetweenParents() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.hardDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0), ItemDTO(id: "q", title: "q", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0, rooms: [ItemDTO(id: "p", title: "p", updatedAt: t0)]),
        ], childTasks: tasks)
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "q", title: "q", updatedAt: t0), ItemDTO(id: "p", title: "p old", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0), ItemDTO(id: "p", title: "p new", updatedAt: t1)]),
        ], childTasks: tasks)
        let ids = Dictionary(uniqueKeysWithValues: try studios(queue).map { ($0.remoteId, $0.id) })
        #expect(try rooms(queue).map { "\($0.remoteId):\($0.title):\($0.studioId == ids["a"] ? "a" : "b")" } == ["p:p new:b", "q:q:a", "r:r:b"])
        #expect(summary.children["rooms"]?.updated == 2 && summary.children["rooms"]?.deleted == 0 && summary.children["rooms"]?.unchanged == 1)
    }

    @Test("a constraint failing in a grandchild rolls the whole run back and says where")
    func rollbackInAChild() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.hardDeleteMissing, seats: .hardDeleteMissing), equipmentTask(.hardDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "s", name: "S", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0, seats: [ItemDTO(id: "x", title: "x", updatedAt: t0)])],
                      equipment: [ItemDTO(id: "e", title: "e", updatedAt: t0)]),
        ], childTasks: tasks)
        func dump() throws -> String {
            try queue.read { db in
                try ["studio", "room", "equipment", "seat"].map { try Row.fetchAll(db, sql: "SELECT * FROM \($0) ORDER BY id").description }.joined(separator: "\n")
            }
        }
        let before = try dump()
        let error = await #expect(throws: ReconcileError.self) {
            try await reconciler.upsertCollection(Studio.self, from: [
                StudioDTO(id: "s", name: "S2", updatedAt: t1, rooms: [ItemDTO(id: "r2", title: "r2", updatedAt: t1, seats: [ItemDTO(id: "bad", title: "", updatedAt: t1)])]),
                StudioDTO(id: "t", name: "T", updatedAt: t1),
            ], deletionPolicy: .hardDeleteMissing, childTasks: tasks)
        }
        #expect(error?.table == "seat" && error?.remoteId == "bad" && error?.step == .insert)
        #expect(error?.underlying is DatabaseError)
        #expect(try dump() == before)
    }

    @Test("the summary counts every outcome of one run")
    func summaryCounts() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: ["a", "b", "c", "d", "e"].map { StudioDTO(id: $0, name: $0, updatedAt: t0) })
        try await reconciler.upsertCollection(Studio.self, from: ["a", "b", "c", "d"].map { StudioDTO(id: $0, name: $0, updatedAt: t0) }, deletionPolicy: .softDeleteMissing)
        // a newer, b same, c older, d missing, e back newer, f new.
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "f", name: "f", updatedAt: t1), StudioDTO(id: "e", name: "e2", updatedAt: t1), StudioDTO(id: "c", name: "c", updatedAt: t0.addingTimeInterval(-1)),
            StudioDTO(id: "b", name: "b", updatedAt: t0), StudioDTO(id: "a", name: "a2", updatedAt: t1),
        ], deletionPolicy: .softDeleteMissing)
        var expected = ReconcileSummary()
        expected.touchedIDs = ["f", "e", "a"]
        expected.inserted = 1
        expected.updated = 1
        expected.unchanged = 2
        expected.softDeleted = 1
        expected.reactivated = 1
        #expect(summary == expected)
    }

    @Test("stamps compare to the millisecond GRDB stores: a stamp with a fraction of a millisecond counts as seen, not newer")
    func millisecondStamps() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let stamp = Date(timeIntervalSince1970: 1_700_000_000.123_456_7)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: stamp)])
        let again = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: stamp)])
        #expect(again.unchanged == 1 && again.updated == 0)
        let later = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A2", updatedAt: stamp.addingTimeInterval(0.001))])
        #expect(later.updated == 1)
    }

    @Test("the stored-date reader agrees with GRDB's over many dates, and leaves other shapes to GRDB")
    func storedDateReader() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let date = Date(timeIntervalSince1970: Double.random(in: -5_000_000_000...8_000_000_000, using: &generator))
            let value = date.databaseValue
            guard case .string(let text) = value.storage else { Issue.record("not text"); return }
            let expected = Date.fromDatabaseValue(value).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
            #expect(StoredDate.millis(text) == expected, "\(text)")
        }
        #expect(StoredDate.millis("1500-01-01 00:00:00") == nil, "Julian dates are left to GRDB")
        #expect(StoredDate.millis("2024-13-01 00:00:00") == nil)
        #expect(TableReconciler<Studio>.millis(DatabaseValue(value: 1.5)!) == 1_500)
        #expect(TableReconciler<Studio>.millis("2024-01-02T03:04:05Z".databaseValue) == TableReconciler<Studio>.millis(Date(timeIntervalSince1970: 1_704_164_645)))
        #expect(TableReconciler<Studio>.millis(DatabaseValue.null) == nil)
    }

    @Test("a child moving off a parent deleted in the same run moves (children run before parents go); an older stamp moves nothing")
    func moveOffADeletedParent() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let tasks = [roomsTask(.hardDeleteMissing)]
        try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0)]),
            StudioDTO(id: "b", name: "B", updatedAt: t0),
        ], childTasks: tasks)
        let before = try #require(try rooms(queue).first)
        let summary = try await reconciler.upsertCollection(Studio.self, from: [
            StudioDTO(id: "b", name: "B", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0)]),
        ], deletionPolicy: .hardDeleteMissing, childTasks: tasks)
        let b = try #require(try studios(queue).first)
        let after = try #require(try rooms(queue).first)
        #expect(b.remoteId == "b" && after.id == before.id && after.studioId == b.id, "the same row, moved, not deleted by the cascade and inserted again")
        #expect(summary.deleted == 1 && summary.children["rooms"]?.updated == 1 && summary.children["rooms"]?.inserted == 0)

        // A late payload listing it under a new parent with an older stamp moves nothing.
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "c", name: "C", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0 - 1)])],
                                              childTasks: tasks)
        #expect(try rooms(queue).first?.studioId == b.id)
    }

    @Test("a tombstone the server sends through apply stays; only a row that was a tombstone counts as reactivated")
    func tombstoneFromApply() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0)])
        let summary = try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t1, deletedAt: t1)])
        #expect(summary.updated == 1 && summary.reactivated == 0)
        #expect(try studios(queue).first?.deletedAt == t1)
    }

    @Test("a nil parent key for a parent with children is an error naming the parent, and nothing is written")
    func nilParentKey() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        let reconciler = Reconciler(writer: queue)
        let keyless = AnyChildTask(ChildSyncTask<StudioDTO, Studio, Room>(
            "rooms", extract: \.rooms, parentColumn: Column("studioId"), parentKey: { _ in nil as Int64? },
            link: { room, studio in room.studioId = studio.id }))
        let error = await #expect(throws: ReconcileError.self) {
            try await reconciler.upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0, rooms: [ItemDTO(id: "r", title: "r", updatedAt: t0)])],
                                                  childTasks: [keyless])
        }
        #expect(error?.table == "studio" && error?.remoteId == "a" && error?.description.contains("didInsert") == true)
        #expect(try studios(queue).isEmpty)
    }

    @Test("the static reconcile keeps nothing of a failed run, even when the caller's transaction goes on")
    func staticReconcileIsAtomic() async throws {
        let (queue, directory) = try database()
        defer { directory.remove() }
        try await Reconciler(writer: queue).upsertCollection(Studio.self, from: [StudioDTO(id: "a", name: "A", updatedAt: t0)])
        try await queue.write { db in
            do {
                _ = try Reconciler.reconcile(Studio.self, [StudioDTO(id: "b", name: "B", updatedAt: self.t0), StudioDTO(id: "a", name: "explode", updatedAt: self.t1)], in: db)
                Issue.record("expected the run to fail")
            } catch {}
            _ = try Reconciler.reconcile(Studio.self, [StudioDTO(id: "c", name: "C", updatedAt: self.t0)], in: db)
        }
        #expect(try studios(queue).map(\.remoteId) == ["a", "c"])
    }
}
