import Foundation
import GRDB
import Tandem
import TandemCore

/// The figure of `tandem bench reconcile`: a full-slice payload reconciled into an app's table
/// (10 % of the rows newer, 5 % missing and soft-deleted, 5 % new), against a hand-written SQL
/// upsert-and-soft-delete of the same change: a temporary table, one `INSERT … ON CONFLICT … WHERE
/// excluded.updatedAt > updatedAt`, and one `UPDATE` for the missing rows. Target: at most 2× its
/// time. Each side starts from a copy of the same database file.
enum ReconcileBenchmarks {
    struct StudioDTO: RemoteStampedDTO {
        var id: String
        var name: String
        var city: String
        var updatedAt: Date
    }

    struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SoftDeletable {
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

        mutating func apply(_ dto: StudioDTO) {
            name = dto.name
            city = dto.city
        }

        mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
    }

    static func run(rows count: Int, repetitions: Int) async throws -> BenchReport {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-reconcile-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let seed = directory.appendingPathComponent("seed.sqlite")
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        let t1 = t0.addingTimeInterval(3_600)
        let now = t0.addingTimeInterval(7_200)

        let queue = try DatabaseQueue(path: seed.path)
        try await queue.write { db in
            try db.create(table: "studio") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("remoteId", .text).notNull().unique()
                table.column("name", .text).notNull()
                table.column("city", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("deletedAt", .datetime)
            }
            let insert = try db.makeStatement(sql: "INSERT INTO studio (remoteId, name, city, updatedAt) VALUES (?, ?, ?, ?)")
            let stamp = t0.databaseValue
            for index in 0..<count {
                try insert.execute(arguments: ["s\(index)", "Studio \(index)", "Oslo", stamp])
            }
        }
        try queue.close()

        // Of the rows: every 20th is missing, every 10th (of the rest) newer; then 5 % new ids.
        var dtos: [StudioDTO] = []
        dtos.reserveCapacity(count)
        for index in 0..<count where index % 20 != 7 {
            let newer = index % 10 == 3
            dtos.append(StudioDTO(id: "s\(index)", name: newer ? "Renamed \(index)" : "Studio \(index)", city: "Oslo", updatedAt: newer ? t1 : t0))
        }
        for index in 0..<count / 20 {
            dtos.append(StudioDTO(id: "n\(index)", name: "New \(index)", city: "Rome", updatedAt: t1))
        }
        let expected = (missing: (0..<count).filter { $0 % 20 == 7 }.count, newer: (0..<count).filter { $0 % 20 != 7 && $0 % 10 == 3 }.count, new: count / 20)

        let clock = ContinuousClock()
        var ours = Duration.seconds(Int64.max)
        var baseline = Duration.seconds(Int64.max)
        var summary = ReconcileSummary()
        for repetition in 0..<repetitions {
            let oursQueue = try copy(seed, to: directory.appendingPathComponent("ours-\(repetition).sqlite"))
            let reconciler = Reconciler(writer: oursQueue)
            let start = clock.now
            summary = try await reconciler.upsertCollection(Studio.self, from: dtos, deletionPolicy: .softDeleteMissing, now: now)
            ours = min(ours, clock.now - start)
            let oursState = try await state(of: oursQueue)
            try oursQueue.close()

            let baselineQueue = try copy(seed, to: directory.appendingPathComponent("baseline-\(repetition).sqlite"))
            let baselineStart = clock.now
            try await handWritten(dtos, into: baselineQueue, now: now)
            baseline = min(baseline, clock.now - baselineStart)
            let baselineState = try await state(of: baselineQueue)
            try baselineQueue.close()
            guard oursState == baselineState else {
                throw TandemError(.internal, "the reconciler and the hand-written SQL left different tables: \(oursState) and \(baselineState)")
            }
        }
        guard summary.inserted == expected.new, summary.updated == expected.newer, summary.softDeleted == expected.missing else {
            throw TandemError(.internal, "the reconciler did not do the expected change: \(summary.inserted) inserted, \(summary.updated) updated, \(summary.softDeleted) soft-deleted")
        }
        var report = BenchReport(title: "tandem bench reconcile")
        report.add("reconcile \(dtos.count) DTOs into \(count) rows (\(expected.newer) newer, \(expected.missing) soft-deleted, \(expected.new) new) vs hand-written SQL upsert",
                   ours: ours, baseline: baseline, operations: dtos.count, unit: "DTOs", target: 2)
        return report
    }

    /// A fresh copy of `seed`, opened.
    private static func copy(_ seed: URL, to file: URL) throws -> DatabaseQueue {
        try FileManager.default.copyItem(at: seed, to: file)
        return try DatabaseQueue(path: file.path)
    }

    /// The same change in SQL a developer would write by hand.
    private static func handWritten(_ dtos: [StudioDTO], into queue: DatabaseQueue, now: Date) async throws {
        try await queue.write { db in
            try db.execute(sql: "CREATE TEMP TABLE incoming (remoteId TEXT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, updatedAt DATETIME NOT NULL)")
            let insert = try db.makeStatement(sql: "INSERT OR REPLACE INTO incoming (remoteId, name, city, updatedAt) VALUES (?, ?, ?, ?)")
            for dto in dtos {
                try insert.execute(arguments: [dto.id, dto.name, dto.city, dto.updatedAt])
            }
            try db.execute(sql: """
                INSERT INTO studio (remoteId, name, city, updatedAt) SELECT remoteId, name, city, updatedAt FROM incoming WHERE true
                ON CONFLICT (remoteId) DO UPDATE SET name = excluded.name, city = excluded.city, updatedAt = excluded.updatedAt, deletedAt = NULL
                WHERE excluded.updatedAt > studio.updatedAt
                """)
            try db.execute(sql: "UPDATE studio SET deletedAt = ? WHERE deletedAt IS NULL AND remoteId NOT IN (SELECT remoteId FROM incoming)", arguments: [now])
            try db.execute(sql: "DROP TABLE incoming")
        }
    }

    /// What the table holds, to check both sides did the same.
    private static func state(of queue: DatabaseQueue) async throws -> [String] {
        try await queue.read { db in
            try [
                String.fetchOne(db, sql: "SELECT count(*) FROM studio") ?? "",
                String.fetchOne(db, sql: "SELECT count(*) FROM studio WHERE deletedAt IS NOT NULL") ?? "",
                String.fetchOne(db, sql: "SELECT count(*) FROM studio WHERE name LIKE 'Renamed%'") ?? "",
                String.fetchOne(db, sql: "SELECT group_concat(remoteId || name || city || updatedAt || ifnull(deletedAt, '-'), ',') FROM (SELECT * FROM studio ORDER BY remoteId)").map { String($0.hashValue) } ?? "",
            ]
        }
    }
}
