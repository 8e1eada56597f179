import Foundation
import GRDB
import TandemCore

/// Reconciles server payloads into the app's own GRDB tables ("upsert + reconcile"): each DTO is
/// inserted or, when its stamp is newer, applied to its row; rows of the deletion scope the
/// payload does not list are kept, deleted or soft-deleted as the policy says; child tasks do the
/// same for each parent's nested collections. One write transaction per call: an error anywhere
/// leaves the database as it was, and is thrown as a ``ReconcileError`` saying what failed.
///
/// ```swift
/// let reconciler = Reconciler(writer: dbQueue)
/// let summary = try await reconciler.upsertCollection(Studio.self, from: dtos, deletionPolicy: .softDeleteMissing)
/// ```
public struct Reconciler: Sendable {
    /// The database the reconciler writes to: each `upsertCollection` call is one write transaction
    /// on it.
    public let writer: any DatabaseWriter

    /// A reconciler that writes to `writer` (a GRDB `DatabaseQueue` or `DatabasePool`).
    public init(writer: any DatabaseWriter) {
        self.writer = writer
    }

    /// Ids are looked up this many at a time (under SQLite's limit of bound variables).
    static let chunkSize = 500

    /// Reconciles `dtos` into `Model`'s table.
    ///
    /// - A DTO whose id has no row is inserted; a row is updated only from a strictly newer stamp
    ///   (an equal or older one changes nothing, and the row counts as seen). Stamps compare to
    ///   the millisecond, the precision GRDB stores dates with.
    /// - Several DTOs with one id: the newest stamp wins; on a tie, the last.
    /// - Rows of `scope` (every row of the table by default) that the payload does not list follow
    ///   `deletionPolicy`. With `requireNonEmptyFullSlice`, an empty payload deletes nothing.
    /// - A soft-deleted row that comes back with a newer stamp is reactivated; one still missing
    ///   stays a tombstone, its `deletedAt` untouched.
    /// - `childTasks` then reconcile each listed parent's children (whatever its stamp).
    /// - `now` stamps `deletedAt`.
    @discardableResult
    public func upsertCollection<Model: SyncableModel>(
        _ type: Model.Type = Model.self, from dtos: [Model.DTO], deletionPolicy: DeletionPolicy = .none,
        scope: QueryInterfaceRequest<Model>? = nil, childTasks: [AnyChildTask<Model>] = [],
        requireNonEmptyFullSlice: Bool = true, now: Date = Date()
    ) async throws -> ReconcileSummary {
        try await writer.write { db in
            try Self.reconcile(type, dtos, in: db, deletionPolicy: deletionPolicy, scope: scope, childTasks: childTasks,
                               requireNonEmptyFullSlice: requireNonEmptyFullSlice, now: now)
        }
    }

    /// The work of ``upsertCollection(_:from:deletionPolicy:scope:childTasks:requireNonEmptyFullSlice:now:)``
    /// inside a transaction the caller holds, in a savepoint of its own: when it throws, nothing of
    /// it stays, even if the caller goes on with its transaction.
    public static func reconcile<Model: SyncableModel>(
        _ type: Model.Type, _ dtos: [Model.DTO], in db: Database, deletionPolicy: DeletionPolicy = .none,
        scope: QueryInterfaceRequest<Model>? = nil, childTasks: [AnyChildTask<Model>] = [],
        requireNonEmptyFullSlice: Bool = true, now: Date = Date()
    ) throws -> ReconcileSummary {
        let deletes = deletionPolicy != .none && !(requireNonEmptyFullSlice && dtos.isEmpty)
        let table = TableReconciler<Model>(deletionScope: deletes ? .request(scope ?? Model.all()) : nil, parent: nil, keepsRows: !childTasks.isEmpty)
        var summary = ReconcileSummary()
        try db.inSavepoint {
            summary = try table.reconcile(dtos, owners: nil, in: db, deletionPolicy: deletionPolicy, childTasks: childTasks, now: now)
            return .commit
        }
        return summary
    }
}

/// The rows whose absence from a payload counts.
enum DeletionScope<Model: SyncableModel> {
    /// The rows of a request.
    case request(QueryInterfaceRequest<Model>)
    /// The rows whose `column` holds one of `keys` (the children of some parents).
    case keys(Column, [DatabaseValue])
}

/// How a child row points at its parent: `column` holds the key, `keys[owner]` is the key of
/// the parent at `owner`, and `link` makes the row point at it.
struct ParentLink<Model: SyncableModel> {
    let column: Column
    let keys: [DatabaseValue]
    let link: (inout Model, Int) -> Void
}

/// One table's part of a reconciliation: the listed DTOs upserted, the scope's missing rows
/// deleted, then the child tasks of the listed rows.
///
/// The work is O(payload + scope): the scope is read once (ids, stamps and parent keys only),
/// the listed ids outside it are looked up a chunk at a time, and whole rows are read only for
/// those that change (or, when child tasks need them, for every listed one).
struct TableReconciler<Model: SyncableModel> {
    typealias ID = Model.DTO.ID

    /// nil: nothing is deleted, and no scope is read.
    let deletionScope: DeletionScope<Model>?
    let parent: ParentLink<Model>?
    /// Child tasks need every listed row.
    let keepsRows: Bool

    private struct Stored {
        /// `updatedAt` in milliseconds; nil when the column has none.
        var stamp: Int64?
        var parentKey: DatabaseValue
    }

    private enum Plan {
        case insert, update, relink, unchanged
    }

    private var table: String { Model.databaseTableName }

    func reconcile(_ dtos: [Model.DTO], owners: [Int]?, in db: Database, deletionPolicy: DeletionPolicy,
                   childTasks: [AnyChildTask<Model>], now: Date) throws -> ReconcileSummary {
        var summary = ReconcileSummary()
        // One DTO per id, in the order ids first appear: the newest stamp, the last on a tie.
        var picked: [Model.DTO] = []
        var pickedOwners: [Int] = []
        var position: [ID: Int] = [:]
        position.reserveCapacity(dtos.count)
        for (index, dto) in dtos.enumerated() {
            let owner = owners?[index] ?? 0
            if let at = position[dto.id] {
                if dto.updatedAt >= picked[at].updatedAt {
                    picked[at] = dto
                    pickedOwners[at] = owner
                }
            } else {
                position[dto.id] = picked.count
                picked.append(dto)
                pickedOwners.append(owner)
            }
        }

        // What is stored: the scope's rows, then the listed ids outside it.
        var stored: [ID: Stored] = [:]
        stored.reserveCapacity(picked.count)
        var scoped: [ID] = []
        try step(.lookup, nil) {
            switch deletionScope {
            case .request(let request)?:
                try read(request, into: &stored, scoped: &scoped, in: db)
            case .keys(let column, let keys)?:
                try chunked(keys) { chunk in
                    try read(Model.filter(chunk.contains(column)), into: &stored, scoped: &scoped, in: db)
                }
            case nil:
                break
            }
            let unknown = picked.lazy.map(\.id).filter { stored[$0] == nil }
            var discard: [ID] = []
            try chunked(Array(unknown)) { chunk in
                try read(Model.filter(chunk.contains(Model.remoteIDColumn)), into: &stored, scoped: &discard, in: db)
            }
        }

        // What each DTO does, and the whole rows that takes.
        var plans: [Plan] = []
        plans.reserveCapacity(picked.count)
        var wanted: [ID] = []
        for (index, dto) in picked.enumerated() {
            guard let row = stored[dto.id] else {
                plans.append(.insert)
                continue
            }
            let plan: Plan
            let stamp = Self.millis(dto.updatedAt)
            if stamp > row.stamp ?? .min {
                plan = .update
            } else if let parent, stamp == row.stamp, row.parentKey != parent.keys[pickedOwners[index]] {
                // Listed under another parent with the same stamp: it moved. An older stamp
                // changes nothing, its parent included.
                plan = .relink
            } else {
                plan = .unchanged
            }
            plans.append(plan)
            if plan != .unchanged || keepsRows { wanted.append(dto.id) }
        }
        var rows: [ID: Model] = [:]
        rows.reserveCapacity(wanted.count)
        try step(.lookup, nil) {
            try chunked(wanted) { chunk in
                let cursor = try Model.filter(chunk.contains(Model.remoteIDColumn)).fetchCursor(db)
                while let row = try cursor.next() { rows[row.remoteId] = row }
            }
        }

        // Upserts, in the payload's order.
        var kept: [Model] = []
        if keepsRows { kept.reserveCapacity(picked.count) }
        func fetched(_ id: ID) throws -> Model {
            guard let row = rows[id] else {
                throw ReconcileError(table: table, remoteId: "\(id)", step: .lookup,
                                     underlying: TandemError(.internal, "the row was found by its id and then not read back; is \(Model.remoteIDColumn.name) of the id's type?"))
            }
            return row
        }
        for (index, dto) in picked.enumerated() {
            let owner = pickedOwners[index]
            switch plans[index] {
            case .insert:
                var row = try step(.insert, dto.id) { Model(dto: dto) }
                parent?.link(&row, owner)
                row.updatedAt = dto.updatedAt
                try step(.insert, dto.id) { try row.insert(db) }
                summary.inserted += 1
                summary.touchedIDs.append("\(dto.id)")
                if keepsRows { kept.append(row) }
            case .update:
                var row = try fetched(dto.id)
                // Cleared before `apply`, which may set a tombstone the server sent.
                let wasTombstone = Self.reactivate(&row)
                try step(.apply, dto.id) { try row.apply(dto) }
                row.updatedAt = dto.updatedAt
                parent?.link(&row, owner)
                if wasTombstone, !Self.isTombstone(row) {
                    summary.reactivated += 1
                } else {
                    summary.updated += 1
                }
                try step(.update, dto.id) { try row.update(db) }
                summary.touchedIDs.append("\(dto.id)")
                if keepsRows { kept.append(row) }
            case .relink:
                var row = try fetched(dto.id)
                parent?.link(&row, owner)
                try step(.update, dto.id) { try row.update(db) }
                summary.updated += 1
                summary.touchedIDs.append("\(dto.id)")
                if keepsRows { kept.append(row) }
            case .unchanged:
                summary.unchanged += 1
                if keepsRows { kept.append(try fetched(dto.id)) }
            }
        }

        // The children, before any parent goes: a child that moves away from a parent deleted
        // now must be moved before a cascade could take it.
        for task in childTasks {
            summary.children[task.name, default: ReconcileSummary()].add(try task.run(kept, picked, db, now))
        }

        // The scope's rows the payload does not list.
        if deletionScope != nil, deletionPolicy != .none {
            let missing = scoped.filter { position[$0] == nil }
            let soft = deletionPolicy == .softDeleteMissing ? Model.self as? any SoftDeletable.Type : nil
            if deletionPolicy == .softDeleteMissing, soft == nil { summary.fellBackToHardDelete = true }
            try step(.delete, nil) {
                try chunked(missing) { chunk in
                    let request = Model.filter(chunk.contains(Model.remoteIDColumn))
                    if let soft {
                        summary.softDeleted += try request.filter(soft.deletedAtColumn == nil).updateAll(db, soft.deletedAtColumn.set(to: now))
                    } else {
                        summary.deleted += try request.deleteAll(db)
                    }
                }
            }
        }
        return summary
    }

    /// Reads ids, stamps and parent keys of `request`'s rows.
    private func read(_ request: QueryInterfaceRequest<Model>, into stored: inout [ID: Stored], scoped: inout [ID], in db: Database) throws {
        var columns: [any SQLSelectable] = [Model.remoteIDColumn, Model.updatedAtColumn]
        if let parent { columns.append(parent.column) }
        let cursor = try Row.fetchCursor(db, request.select(columns))
        while let row = try cursor.next() {
            let idValue: DatabaseValue = row[0]
            guard let id = ID.fromDatabaseValue(idValue) else {
                throw TandemError(.invalidArgument, "a row's \(Model.remoteIDColumn.name) (\(idValue)) is not a \(ID.self): store remote ids as the DTO's id type, in a column of matching affinity")
            }
            let stamp: DatabaseValue = row[1]
            stored[id] = Stored(stamp: Self.millis(stamp), parentKey: parent == nil ? .null : row[2])
            scoped.append(id)
        }
    }

    /// Runs `body` on `values` a chunk at a time.
    private func chunked<Value>(_ values: [Value], _ body: (ArraySlice<Value>) throws -> Void) throws {
        var start = 0
        while start < values.count {
            try body(values[start..<min(start + Reconciler.chunkSize, values.count)])
            start += Reconciler.chunkSize
        }
    }

    /// Runs `body`, telling what failed where. An error of a child task passes as it is.
    private func step<Result>(_ step: ReconcileError.Step, _ id: ID?, _ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch let error as ReconcileError {
            throw error
        } catch {
            throw ReconcileError(table: table, remoteId: id.map { "\($0)" }, step: step, underlying: error)
        }
    }

    /// Whether `row` is soft-deletable and marked deleted.
    private static func isTombstone(_ row: Model) -> Bool {
        (row as? any SoftDeletable)?.deletedAt != nil
    }

    /// Clears `deletedAt` of a soft-deletable row that had it. Returns whether it did.
    private static func reactivate(_ row: inout Model) -> Bool {
        guard var soft = row as? any SoftDeletable, soft.deletedAt != nil else { return false }
        soft.deletedAt = nil
        // The same type as `row`, which is soft-deletable.
        row = soft as! Model
        return true
    }

    /// A date in whole milliseconds since 1970, the precision GRDB stores dates with.
    static func millis(_ date: Date) -> Int64 {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
        // Far outside any real stamp; kept from trapping.
        guard milliseconds.isFinite, abs(milliseconds) < 9e18 else { return milliseconds > 0 ? .max : .min }
        return Int64(milliseconds)
    }

    /// A stored stamp in whole milliseconds: GRDB's "yyyy-MM-dd HH:mm:ss.SSS" read without a
    /// calendar, anything else as GRDB reads a date.
    static func millis(_ value: DatabaseValue) -> Int64? {
        switch value.storage {
        case .null:
            return nil
        case .string(let text):
            if let stamp = StoredDate.millis(text) { return stamp }
        case .int64, .double, .blob:
            break
        }
        return Date.fromDatabaseValue(value).map(millis)
    }
}

/// Reads GRDB's stored dates ("yyyy-MM-dd HH:mm:ss.SSS" or without the fraction, UTC) by
/// arithmetic.
enum StoredDate {
    static func millis(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { bytes -> Int64? in
            guard bytes.count == 19 || bytes.count == 23,
                  bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
                  bytes[10] == UInt8(ascii: " ") || bytes[10] == UInt8(ascii: "T"),
                  bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":")
            else { return nil }
            func number(_ from: Int, _ count: Int) -> Int64? {
                var value: Int64 = 0
                for index in from..<from + count {
                    let digit = bytes[index] &- UInt8(ascii: "0")
                    guard digit < 10 else { return nil }
                    value = value * 10 + Int64(digit)
                }
                return value
            }
            guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
                  let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
                  (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60,
                  // Before the Gregorian calendar GRDB's calendar is Julian: left to it.
                  year >= 1583
            else { return nil }
            var fraction: Int64 = 0
            if bytes.count == 23 {
                guard bytes[19] == UInt8(ascii: "."), let milliseconds = number(20, 3) else { return nil }
                fraction = milliseconds
            }
            let days = CivilDate.daysSince1970(year: year, month: month, day: day)
            return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + fraction
        }
    }
}
