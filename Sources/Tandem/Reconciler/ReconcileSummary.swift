/// What one reconciliation did.
public struct ReconcileSummary: Sendable, Hashable {
    /// The ids inserted, updated or reactivated, each once, in the payload's order.
    public var touchedIDs: [String] = []
    public var inserted = 0
    public var updated = 0
    /// Listed with a stamp no newer than the row's: left as it was, and not deleted.
    public var unchanged = 0
    public var deleted = 0
    public var softDeleted = 0
    /// Soft-deleted rows that came back with a newer stamp: `deletedAt` cleared, fields applied.
    public var reactivated = 0
    /// `.softDeleteMissing` was asked of a record without `deletedAt`: the rows were deleted.
    public var fellBackToHardDelete = false

    public init() {}
}
