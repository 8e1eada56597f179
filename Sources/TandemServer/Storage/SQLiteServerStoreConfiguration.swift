import Foundation

/// How a ``SQLiteServerStore`` keeps its data.
public struct SQLiteServerStoreConfiguration: Sendable {
    /// Size and batch limits enforced on every commit.
    public var limits = ServerLimits()
    /// How long tombstones of deleted documents (and the stored answers of applied mutations) are
    /// kept. A listener resuming from before the oldest pruned tombstone gets a full snapshot.
    /// Default 30 days.
    public var tombstoneRetention: Duration = .seconds(30 * 24 * 3600)
    /// How often `run()` prunes. Default hourly.
    public var pruneInterval: Duration = .seconds(3600)
    /// Whether each commit is flushed to disk (`synchronous = FULL`) before it is acknowledged, so
    /// an acknowledged write survives a power loss, not only a crash. Default true.
    public var durableCommits = true
    /// The server's wall clock, for create/update times and `serverTimestamp`.
    public var now: @Sendable () -> Date = { Date() }

    public init() {}
}
