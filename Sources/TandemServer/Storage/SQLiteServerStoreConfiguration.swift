import Foundation
import Logging

/// How a ``SQLiteServerStore`` keeps its data.
///
/// Limits are not here: the server passes its own ``ServerLimits`` with every commit.
public struct SQLiteServerStoreConfiguration: Sendable {
    /// How long tombstones of deleted documents (and the records of decided mutations) are kept. A
    /// listener resuming from before the oldest pruned tombstone gets a full snapshot; a mutation
    /// whose record was pruned is answered `unknown`. Default 30 days.
    public var tombstoneRetention: Duration = .seconds(30 * 24 * 3600)
    /// How often `run()` prunes, on `clock`. Default hourly.
    public var pruneInterval: Duration = .seconds(3600)
    /// Whether each commit is flushed to disk (`synchronous = FULL`) before it is acknowledged, so
    /// an acknowledged write survives a power loss, not only a crash. Default true.
    public var durableCommits = true
    /// The server's wall clock, for create/update times, `serverTimestamp` and retention.
    public var now: @Sendable () -> Date = { Date() }
    /// The clock `run()` waits on between prunings; tests pass a manual one.
    public var clock: any Clock<Duration> = ContinuousClock()
    /// Where housekeeping failures are logged.
    public var logger = Logger(label: "tandem.store")

    /// The defaults each property states: 30 days' retention, hourly pruning, durable commits.
    public init() {}
}
