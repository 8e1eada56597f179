import ServiceLifecycle
import TandemCore

/// Where a server keeps its documents: the one place writes are applied, exactly once, and from which
/// reads, snapshots and change feeds are served.
///
/// A store is a `Service`: run it in the server's service group; its `run()` does housekeeping such
/// as pruning old tombstones. ``SQLiteServerStore`` is the embedded default.
public protocol ServerStore: Service {
    /// Applies mutations atomically in one commit stamped with the next version, or throws and applies
    /// none. Returns only once the commit is durable. A mutation whose `MutationID` was already applied
    /// is not applied again; it is answered with its original acknowledgement.
    func commit(_ mutations: [Mutation]) async throws -> CommitResult

    /// One document, or nil.
    func document(at path: DocumentPath) async throws -> Document?

    /// The documents a target covers (after its query), and the version they were read at.
    func read(_ target: ListenTarget) async throws -> StoreSnapshot

    /// The documents of a target whose query has no operations, written as wire changes in path
    /// order, in frames of at most `groupSize`, each handed to `frames` as soon as it is written so
    /// the server sends the first while the rest is read. A store that keeps bodies as JSON text
    /// can copy them instead of parsing and writing each again. Returns the version the documents
    /// were read at; `frames` returning false stops the read early. Returning nil (the default,
    /// without calling `frames`) makes the server encode what ``read(_:)`` returns.
    func encodedSnapshot(_ target: ListenTarget, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) async throws -> Version?

    /// What changed after `version`, oldest first, never splitting a commit: at most about `limit`
    /// changes (a commit larger than that comes whole). With a target, only changes in its scope;
    /// a document that no longer matches its query comes as a removal. Throws `out-of-range` when
    /// tombstones that old were pruned: the caller must reload a full snapshot.
    func changes(since version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage

    /// The version of the last commit.
    func currentVersion() async throws -> Version

    /// Registers a function called after each commit is durable, in version order, before the
    /// writer is answered. It must not block.
    func observeCommits(_ observer: @escaping @Sendable (CommittedBatch) -> Void)
}

extension ServerStore {
    public func encodedSnapshot(_ target: ListenTarget, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) async throws -> Version? {
        nil
    }
}

/// What one commit changed: its version, and each document's state after it.
public struct CommittedBatch: Sendable, Hashable {
    public var version: Version
    public var changes: [RemoteChange]

    public init(version: Version, changes: [RemoteChange]) {
        self.version = version
        self.changes = changes
    }
}

/// The answer to a commit: one acknowledgement per mutation, in order, and the batch it committed
/// (nil when every mutation was a replay and nothing new was written).
public struct CommitResult: Sendable, Hashable {
    public var acknowledgements: [WriteAcknowledgement]
    public var batch: CommittedBatch?

    public init(acknowledgements: [WriteAcknowledgement], batch: CommittedBatch?) {
        self.acknowledgements = acknowledgements
        self.batch = batch
    }
}

/// Documents read at one version.
public struct StoreSnapshot: Sendable, Hashable {
    public var documents: [Document]
    public var version: Version

    public init(documents: [Document], version: Version) {
        self.documents = documents
        self.version = version
    }
}

/// One page of a change feed.
public struct ChangePage: Sendable, Hashable {
    public var changes: [RemoteChange]
    /// Everything up to this version is in this page or earlier ones: the `since` of the next page.
    public var version: Version
    /// Whether more changes follow this page.
    public var hasMore: Bool

    public init(changes: [RemoteChange], version: Version, hasMore: Bool) {
        self.changes = changes
        self.version = version
        self.hasMore = hasMore
    }
}
