import Foundation
import GRDB

/// Reconciles server payloads into the app's own GRDB tables ("upsert + reconcile"): each DTO is
/// inserted or, when its stamp is newer, applied to its row; rows of the deletion scope the
/// payload does not list are kept, deleted or soft-deleted as the policy says. One write
/// transaction per call: an error anywhere leaves the database as it was, and is thrown.
///
/// ```swift
/// let reconciler = Reconciler(writer: dbQueue)
/// let summary = try await reconciler.upsertCollection(Studio.self, from: dtos, deletionPolicy: .softDeleteMissing)
/// ```
public struct Reconciler: Sendable {
    public let writer: any DatabaseWriter

    public init(writer: any DatabaseWriter) {
        self.writer = writer
    }

    /// Ids are looked up this many at a time (under SQLite's limit of bound variables).
    static let chunkSize = 500

    /// Reconciles `dtos` into `Model`'s table.
    ///
    /// - A DTO whose id has no row is inserted; a row is updated only from a strictly newer stamp
    ///   (an equal or older one changes nothing, and the row counts as seen).
    /// - Several DTOs with one id: the newest stamp wins; on a tie, the last.
    /// - Rows of `scope` (every row of the table by default) that the payload does not list follow
    ///   `deletionPolicy`. With `requireNonEmptyFullSlice`, an empty payload deletes nothing.
    /// - A soft-deleted row that comes back with a newer stamp is reactivated; one still missing
    ///   stays a tombstone, its `deletedAt` untouched.
    /// - `now` stamps `deletedAt`.
    @discardableResult
    public func upsertCollection<Model: SyncableModel>(
        _ type: Model.Type = Model.self, from dtos: [Model.DTO], deletionPolicy: DeletionPolicy = .none,
        scope: QueryInterfaceRequest<Model>? = nil, requireNonEmptyFullSlice: Bool = true, now: Date = Date()
    ) async throws -> ReconcileSummary {
        try await writer.write { db in
            try Self.reconcile(type, dtos, in: db, deletionPolicy: deletionPolicy, scope: scope,
                               requireNonEmptyFullSlice: requireNonEmptyFullSlice, now: now)
        }
    }

    /// The work of ``upsertCollection(_:from:deletionPolicy:scope:requireNonEmptyFullSlice:now:)``
    /// inside a transaction the caller holds.
    static func reconcile<Model: SyncableModel>(
        _ type: Model.Type, _ dtos: [Model.DTO], in db: Database, deletionPolicy: DeletionPolicy,
        scope: QueryInterfaceRequest<Model>?, requireNonEmptyFullSlice: Bool, now: Date
    ) throws -> ReconcileSummary {
        var summary = ReconcileSummary()
        // One DTO per id, in the order ids first appear: the newest stamp, the last on a tie.
        var order: [Model.DTO.ID] = []
        var chosen: [Model.DTO.ID: Model.DTO] = [:]
        chosen.reserveCapacity(dtos.count)
        for dto in dtos {
            if let current = chosen[dto.id] {
                if dto.updatedAt >= current.updatedAt { chosen[dto.id] = dto }
            } else {
                order.append(dto.id)
                chosen[dto.id] = dto
            }
        }
        // The rows they name, a chunk of ids at a time.
        var existing: [Model.DTO.ID: Model] = [:]
        existing.reserveCapacity(order.count)
        var start = 0
        while start < order.count {
            let chunk = order[start..<min(start + chunkSize, order.count)]
            for row in try Model.filter(chunk.contains(Model.remoteIDColumn)).fetchAll(db) {
                existing[row.remoteId] = row
            }
            start += chunkSize
        }
        for id in order {
            let dto = chosen[id]!
            guard var row = existing[id] else {
                var row = Model(dto: dto)
                row.updatedAt = dto.updatedAt
                try row.insert(db)
                summary.inserted += 1
                summary.touchedIDs.append("\(id)")
                continue
            }
            guard dto.updatedAt > row.updatedAt else {
                summary.unchanged += 1
                continue
            }
            try row.apply(dto)
            row.updatedAt = dto.updatedAt
            if Self.reactivate(&row) {
                summary.reactivated += 1
            } else {
                summary.updated += 1
            }
            try row.update(db)
            summary.touchedIDs.append("\(id)")
        }
        guard deletionPolicy != .none, !(requireNonEmptyFullSlice && dtos.isEmpty) else { return summary }
        // The scope's ids the payload does not list.
        let listed = Set(order)
        let scoped = try (scope ?? Model.all()).select(Model.remoteIDColumn, as: Model.DTO.ID.self).fetchAll(db)
        let missing = scoped.filter { !listed.contains($0) }
        start = 0
        while start < missing.count {
            let chunk = missing[start..<min(start + chunkSize, missing.count)]
            let rows = Model.filter(chunk.contains(Model.remoteIDColumn))
            if deletionPolicy == .softDeleteMissing, let marked = try Self.softDelete(rows, in: db, now: now) {
                summary.softDeleted += marked
            } else {
                if deletionPolicy == .softDeleteMissing { summary.fellBackToHardDelete = true }
                summary.deleted += try rows.deleteAll(db)
            }
            start += chunkSize
        }
        return summary
    }

    /// Clears `deletedAt` of a soft-deletable row that had it. Returns whether it did.
    private static func reactivate<Model: SyncableModel>(_ row: inout Model) -> Bool {
        guard var soft = row as? any SoftDeletable, soft.deletedAt != nil else { return false }
        soft.deletedAt = nil
        // The same type as `row`, which is soft-deletable.
        row = soft as! Model
        return true
    }

    /// Sets `deletedAt` on the rows not marked yet; nil when the record cannot be soft-deleted.
    private static func softDelete<Model: SyncableModel>(_ rows: QueryInterfaceRequest<Model>, in db: Database, now: Date) throws -> Int? {
        guard let soft = Model.self as? any SoftDeletable.Type else { return nil }
        let column = soft.deletedAtColumn
        return try rows.filter(column == nil).updateAll(db, column.set(to: now))
    }
}
