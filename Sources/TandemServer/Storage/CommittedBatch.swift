import Synchronization
import TandemCore

/// What one commit changed: its version, and each document's state after it.
public struct CommittedBatch: Sendable, Hashable {
    /// The version the commit took.
    public var version: Version
    /// Each document the commit changed, as it left it (a deletion carries no document).
    public var changes: [RemoteChange]

    /// A batch of `changes` committed at `version`.
    public init(version: Version, changes: [RemoteChange]) {
        self.version = version
        self.changes = changes
    }
}

/// What a store tells its observers after commits: the batches that became visible (each once,
/// those that changed documents) and the watermark below which every commit is visible.
///
/// A store that commits one transaction at a time reports its batches in version order with the
/// watermark at the last. A store whose commits can become visible out of order reports each
/// batch as it commits and raises `visibleThrough` only once no commit below it is missing; the
/// fan-out holds batches above the watermark back and releases them in version order.
public struct CommitNotice: Sendable, Hashable {
    /// The batches that became visible, each reported once; none for a commit that changed no
    /// document.
    public var batches: [CommittedBatch]
    /// Every commit at or below this version is visible.
    public var visibleThrough: Version
    /// The store could not tell some commit at or below `visibleThrough` (a node of a shared
    /// database cut off from it for longer than it keeps the commits its nodes have not read):
    /// the fan-out has every listener load again from the version it had reached, so none is left
    /// with a view that misses a commit.
    public var incomplete: Bool

    /// A notice of `batches`, with every commit at or below `visibleThrough` visible.
    public init(batches: [CommittedBatch], visibleThrough: Version, incomplete: Bool = false) {
        self.batches = batches
        self.visibleThrough = visibleThrough
        self.incomplete = incomplete
    }
}

/// Functions a store calls with what it did (its commits, the size of its group commits), each
/// in the order they were added.
package final class Observers<Value: Sendable>: Sendable {
    private let observers = Mutex<[@Sendable (Value) -> Void]>([])

    package init() {}

    package func add(_ observer: @escaping @Sendable (Value) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    /// Tells every observer, outside the lock that keeps them.
    package func publish(_ value: Value) {
        for observer in observers.withLock({ $0 }) { observer(value) }
    }
}

/// The observers a store tells of its commits (``ServerStore/observeCommits(_:)``).
package typealias CommitObservers = Observers<CommitNotice>
