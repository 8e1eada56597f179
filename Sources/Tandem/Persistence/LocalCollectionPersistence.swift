import TandemCore

/// What a collection engine keeps between launches: the server's last confirmed documents, the
/// writes not yet acknowledged, and where the listener stopped.
public struct LocalCollectionState: Sendable, Hashable {
    /// The documents as the server last confirmed them.
    public var documents: [Document]
    /// Writes not yet acknowledged, with the client id and next sequence number.
    public var outbox: Outbox
    /// The last version the listener saw, to resume from after a restart.
    public var resumeVersion: Version?
    /// A digest of the query whose listener reached ``resumeVersion``: a relaunched engine
    /// listening to the same query resumes from there; another query starts from a snapshot.
    public var resumeQuery: String?

    /// A state with these documents, outbox and resume point; by default no documents and no resume
    /// point, as for a new engine.
    public init(documents: [Document] = [], outbox: Outbox, resumeVersion: Version? = nil, resumeQuery: String? = nil) {
        self.documents = documents
        self.outbox = outbox
        self.resumeVersion = resumeVersion
        self.resumeQuery = resumeQuery
    }
}

/// One atomic change to a ``LocalCollectionState``: the cached documents and the outbox change
/// together, so a write is never recorded in one and lost from the other.
public struct LocalCollectionChange: Sendable, Hashable {
    /// Start from no documents (a full reload), before applying `upserts`.
    public var replacesAllDocuments = false
    /// Documents the server confirmed, inserted or replaced.
    public var upserts: [Document] = []
    /// When it lines up with `upserts`: each one's data as the server sent it (nil where unknown),
    /// which a store may keep as it is instead of encoding the data again.
    package var encodedUpserts: [String?] = []
    /// The snapshot (see ``SnapshotStaging``) whose staged documents, with `upserts`, replace the
    /// cached ones in this change.
    package var promotesStagedSnapshot: Int?
    /// Documents the server deleted.
    public var deletions: [DocumentPath] = []
    /// Outbox entries added or rewritten (by sequence number).
    public var outboxPuts: [PendingWrite] = []
    /// Outbox entries acknowledged or rejected.
    public var outboxRemovals: [MutationID] = []
    /// The outbox's next sequence number, which must never go back even when the outbox empties:
    /// the server would take a reused number for a replay.
    public var nextSequence: UInt64?
    /// The listener's new resume point.
    public var resumeVersion: Version?
    /// The digest of the query it belongs to (see ``LocalCollectionState/resumeQuery``).
    public var resumeQuery: String?
    /// The cache was dropped: the stored resume point and its query go with it, so a listener
    /// started later (after a relaunch too) loads a whole snapshot instead of resuming from a
    /// version whose documents are no longer kept. Applied before `resumeVersion`.
    public var forgetsResumePoint = false

    /// A change that changes nothing, to fill in field by field.
    public init() {}

    /// Whether the change holds nothing to apply.
    public var isEmpty: Bool {
        promotesStagedSnapshot == nil && !replacesAllDocuments && upserts.isEmpty && deletions.isEmpty && outboxPuts.isEmpty && outboxRemovals.isEmpty
            && nextSequence == nil && resumeVersion == nil && !forgetsResumePoint
    }
}

/// Where a collection engine keeps its ``LocalCollectionState``. Each ``apply(_:)`` is one
/// transaction, durable before it returns.
public protocol LocalCollectionPersistence: Sendable {
    /// The saved state, or nil when nothing was saved for this engine.
    func load() throws -> LocalCollectionState?
    /// Creates the state for a new engine, with its client id.
    func create(clientID: String) throws -> LocalCollectionState
    /// Applies a change atomically.
    func apply(_ change: LocalCollectionChange) throws
    /// Removes everything saved for this engine.
    func clear() throws

    /// The persistence of the same engine for a signed-in user's space: each user's cache, outbox
    /// (with its writer id) and resume point are kept apart from every other user's, and from the
    /// signed-out space, which this persistence itself holds. Asked of the persistence the engine
    /// was made with; the same user always gets the same space.
    func space(for user: String) throws -> any LocalCollectionPersistence
    /// The user whose space the engine showed last (nil: the signed-out space, or none yet), so a
    /// relaunch shows it again before the server has confirmed who is signed in. Kept by the
    /// persistence the engine was made with.
    func lastUser() throws -> String?
    /// Records whose space the engine shows now.
    func setLastUser(_ user: String?) throws
}

/// A persistence that can take a large snapshot's documents while the snapshot still arrives,
/// apart from the cached ones, so that applying the snapshot only swaps them in
/// (``LocalCollectionChange/promotesStagedSnapshot``). Until then the cache stays as it was.
package protocol SnapshotStaging: Sendable {
    /// Stores the documents of a snapshot's changes (with their data's text, when the reader kept
    /// it) for the snapshot `snapshot` (an id unique in the process), possibly later
    /// but before any change applied after this call. `startsSnapshot` drops whatever was staged
    /// before. Staging for another snapshot than the last started is dropped; a piece that fails
    /// makes the promotion of its snapshot fail, so the engine writes the whole snapshot instead.
    func stage(_ changes: [RemoteChange], snapshot: Int, startsSnapshot: Bool)
}
