import Foundation
import ServiceLifecycle
import TandemCore

/// Where a server keeps its documents: the one place writes are decided, exactly once, and from
/// which reads, snapshots and change feeds are served.
///
/// ``SQLiteServerStore`` is the embedded default and ``MemoryServerStore`` keeps everything in
/// memory with the same semantics. A store is a `Service`: run it in the server's service group;
/// its `run()` does housekeeping such as pruning old tombstones.
///
/// A server is its usual caller, but a store can be used directly, as tests and tools do:
///
/// ```swift
/// let store = MemoryServerStore()
/// let result = try await store.commit([.set(try DocumentPath("notes/a"), ["n": 1])])
/// let note = try await store.document(at: try DocumentPath("notes/a"))   // version 1, n = 1
/// let page = try await store.changes(since: .zero, in: nil, limit: 100)
/// ```
///
/// ## The contract
///
/// Every store keeps these invariants; `ServerStoreConformance` in `TandemTesting` checks each of
/// them, and `docs/PROTOCOL.md` ("Implementing a store") explains them with an example.
///
/// 1. **Versions.** Every request that applies writes gets its own version, strictly greater than
///    every version the store answered before, across restarts and crashes, even when the request
///    changed no document (a delete of a missing one). A replayed, refused or unknown answer takes
///    no new version.
/// 2. **Atomic requests.** A request's new mutations apply together or not at all. A refused
///    request writes nothing but the records of its refusal.
/// 3. **Exactly once.** A mutation carrying a `MutationID` is decided once — applied, or refused
///    for good — and the decision is recorded in the same transaction as its writes, with the
///    mutation's `Mutation.contentDigest`. A later request carrying the id is answered with the
///    recorded decision (`replayed`, or `refused` with the same error), never applied again; with
///    another digest it is refused (the id was reused for another write). A record removed by
///    pruning is answered `unknown`. An id below the newest decided sequence of its client that was
///    never decided is refused (sequences must increase). A writer id (the client of a mutation id)
///    belongs to the connection client that first wrote under it, for good; a request from another
///    client using it fails with `permission-denied`. ``CommitPlanner`` implements all of this
///    over a ``StoreTransaction``: use it rather than writing these rules again.
/// 4. **In order.** The requests of one ``commit(_:limits:clientID:authorizer:)`` call are decided in order. If one
///    fails with a transient error (`unavailable`: the database could not commit), no later
///    request of the call is applied: they fail too.
/// 5. **Durable, then visible, then answered.** A commit is durable before it is visible to reads
///    or observers, and visible before its writers are answered.
/// 6. **A watermark.** ``currentVersion()`` is the visible watermark W: every commit at or below W
///    is durable and visible to any read that starts afterwards. W never decreases. Observers hear
///    of each commit that changed documents once, and of W as it moves (``CommitNotice``); a store
///    whose commits become visible out of order reports them as they commit and moves W only when
///    no gap remains below it — the fan-out holds back what lies above W and releases it in order.
/// 7. **Consistent reads.** A read (``read(_:)``, ``encodedSnapshot(_:groupSize:frames:)``)
///    reflects every commit at or below its version and none above it, and its version is at least
///    that of every document it returns.
/// 8. **Change feeds.** ``changes(since:in:limit:)`` returns every change after `since` up to its
///    page's version, oldest first, never splitting a commit. A `since` of zero is always served,
///    however much was pruned: a reader starting from nothing needs no tombstones. Its first page
///    ends no earlier than the newest pruned tombstone (it may hold more than `limit` changes for
///    it), so each page after it starts from a version still kept. Any other `since` older than
///    the newest pruned tombstone, or one beyond W, throws `out-of-range`: the caller fetches again
///    from zero, or reloads a full snapshot.
public protocol ServerStore: Service {
    /// Decides write requests in order, each atomically (see the contract above), and answers each:
    /// a decided request succeeds with one acknowledgement per mutation (`applied`, `replayed`,
    /// `refused` or `unknown`); a request that could not be decided fails, with nothing written or
    /// recorded for it — `invalid-argument` or `resource-exhausted` when it is malformed or over
    /// `limits` (it would fail the same way again), `permission-denied` when it writes under a
    /// writer id another client owns, `unavailable` when the store could not commit.
    ///
    /// `clientID` is the connection client sending the requests (the `hello`'s), which owns every
    /// writer id it is the first to use; nil for requests that stand alone (HTTP), which may use
    /// only writer ids nobody owns and claim none.
    ///
    /// `authorizer`, when given, decides each new mutation from the document before and after it
    /// (``CommitPlanner`` calls it): a refusal refuses the request, recorded like any refusal.
    func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?) async -> [Result<CommitResult, TandemError>]

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
    /// a document that no longer matches its query comes as a removal. A `version` of zero is always
    /// served (what exists now, and the tombstones still kept). Throws `out-of-range` when
    /// tombstones after a nonzero `version` were pruned, or when `version` is beyond the store's:
    /// the caller fetches again from zero, or reloads a full snapshot.
    func changes(since version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage

    /// The next page of a read that began at version zero: what changed after `version` as
    /// ``changes(since:in:limit:)`` gives it, served whatever tombstones after `version` were
    /// pruned, since the reader holds only what the earlier pages of the same read gave it (a
    /// document deleted long ago was not among them). The default refuses as
    /// ``changes(since:in:limit:)`` does; a store that prunes serves it.
    func changes(continuingFromStartAfter version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage

    /// The visible watermark: every commit at or below it is durable and visible.
    func currentVersion() async throws -> Version

    /// The ids of the collections directly under `parent` (at the root when nil) that hold at
    /// least one document, in byte order: what a console browses. A collection whose documents
    /// are all deleted is not listed.
    func collectionIDs(under parent: DocumentPath?) async throws -> [String]

    /// The collection-group names (a collection's last segment) that hold at least one document,
    /// in byte order.
    func collectionGroups() async throws -> [String]

    /// Registers a function called after commits become visible, before their writers are
    /// answered. It must return at once (queue the notice, do not work in it).
    func observeCommits(_ observer: @escaping @Sendable (CommitNotice) -> Void)

    /// Whether commits are under way that the observers have not heard of yet. True is a promise:
    /// the observers get another ``CommitNotice`` after this call, an empty one if those commits
    /// change nothing or fail. Under write load the fan-out holds batches back while it hears
    /// true, for a few notices at most, and sends each listener fewer, larger batches. Must return
    /// at once. The default, false, makes the fan-out deliver every notice as it comes.
    func commitsUnderWay() -> Bool

    /// Registers a function called with the number of write requests each group commit held, for
    /// the server's metrics. The default registers nothing (a store without group commits).
    func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void)

    /// The bytes the store's data takes now (its files, or its database), for the server's
    /// metrics; nil when unknown (the default).
    func storeSize() async -> Int?

    /// Deletes tombstones, and the records of decided mutations, last written before `date`,
    /// keeping each client's newest record. Returns how many tombstones went. Change feeds from a
    /// nonzero version before the newest pruned tombstone become `out-of-range` (one from zero is
    /// still served); a pruned record is answered `unknown`.
    @discardableResult
    func pruneTombstones(olderThan date: Date) async throws -> Int
}

extension ServerStore {
    public func commitsUnderWay() -> Bool { false }

    public func changes(continuingFromStartAfter version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try await changes(since: version, in: target, limit: limit)
    }

    public func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void) {}

    public func storeSize() async -> Int? { nil }

    /// Commits requests that no access rules stand in front of.
    public func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?) async -> [Result<CommitResult, TandemError>] {
        await commit(requests, limits: limits, clientID: clientID, authorizer: nil)
    }

    public func encodedSnapshot(_ target: ListenTarget, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) async throws -> Version? {
        nil
    }

    /// Commits one request with the default limits. A request that could not be decided, or whose
    /// mutations were refused, throws the error; otherwise the acknowledgements say `applied`,
    /// `replayed` or `unknown`.
    public func commit(_ mutations: [Mutation]) async throws -> CommitResult {
        let result = try await commit([mutations], limits: ServerLimits(), clientID: nil)[0].get()
        if let refusal = result.refusal { throw refusal }
        return result
    }

    /// One document, or nil.
    public func document(at path: DocumentPath) async throws -> Document? {
        try await read(.document(path)).documents.first
    }
}
