/// What one reconciliation did: the counts of the parent type, and one summary per child task.
public struct ReconcileSummary: Sendable, Hashable {
    /// The ids inserted, updated or reactivated, each once, in the payload's order (for two child
    /// tasks that share a name, one list after the other).
    public var touchedIDs: [String] = []
    /// Rows inserted for ids that had none.
    public var inserted = 0
    /// Rows that took a newer DTO's fields (or, for a child, moved to another parent).
    public var updated = 0
    /// Listed with a stamp no newer than the row's: left as it was, and not deleted.
    public var unchanged = 0
    /// Rows the payload did not list that were deleted (`.hardDeleteMissing`, or `.softDeleteMissing`
    /// on a record that is not `SoftDeletable`).
    public var deleted = 0
    /// Rows the payload did not list that were given `deletedAt` (`.softDeleteMissing`); a tombstone
    /// already marked is not counted again.
    public var softDeleted = 0
    /// Soft-deleted rows that came back with a newer stamp: `deletedAt` cleared, fields applied.
    public var reactivated = 0
    /// `.softDeleteMissing` was asked of a record without `deletedAt`: the rows were deleted.
    public var fellBackToHardDelete = false
    /// Each child task's summary, by the task's name (its children's in turn in theirs).
    public var children: [String: ReconcileSummary] = [:]

    /// An empty summary: no ids, every count zero.
    public init() {}

    /// Adds `other`'s counts and ids to these (two child tasks that share a name).
    mutating func add(_ other: ReconcileSummary) {
        touchedIDs += other.touchedIDs
        inserted += other.inserted
        updated += other.updated
        unchanged += other.unchanged
        deleted += other.deleted
        softDeleted += other.softDeleted
        reactivated += other.reactivated
        fellBackToHardDelete = fellBackToHardDelete || other.fellBackToHardDelete
        for (name, summary) in other.children {
            children[name, default: ReconcileSummary()].add(summary)
        }
    }
}

/// Why a reconciliation failed. Nothing of it was written: the transaction was rolled back.
public struct ReconcileError: Error, Sendable, CustomStringConvertible {
    /// The part of a reconciliation that failed.
    public enum Step: String, Sendable, Hashable {
        /// Reading the rows the payload names or the deletion scope.
        case lookup
        /// `init(dto:)` and inserting the new row.
        case insert
        /// The record's `apply(_:)`.
        case apply
        /// Writing an updated row.
        case update
        /// Deleting or soft-deleting missing rows.
        case delete
    }

    /// The table where it failed.
    public let table: String
    /// The DTO's id it failed on, when one.
    public let remoteId: String?
    /// The step it failed at.
    public let step: Step
    /// The error from the record or the database.
    public let underlying: any Error

    public var description: String {
        let row = remoteId.map { " of remote id \($0)" } ?? ""
        return "reconciling \(table) failed at \(step.rawValue)\(row): \(underlying). Nothing was written; fix the record or the payload and run it again."
    }
}
