import Foundation
import Synchronization
import TandemCore

/// The machinery the three engines share: the local view and its decoded models, the outbox and
/// its single in-order sender, the listener with retry, persistence and analytics events.
///
/// One owner: the engine's serial executor, `queue` (an ``EngineQueue``), holds the working state
/// (`state`: the view, the models, the listener's and the sender's machines, the space shown) and
/// runs every change of it, one at a time, with its persistence, in the order the changes were
/// asked for. Nothing else touches that state: an app's call, the connection's reader, a listener's
/// stream, the sender's answers, a backoff's deadline and a sign-in each queue a step there (async
/// callers are suspended meanwhile, never blocked), so no change comes from two places and the
/// durable order of outbox entries is the in-memory order. A debug build stops at any access from
/// elsewhere.
///
/// Readers never wait for the owner:
/// - `published` holds an immutable ``EngineSnapshot`` of the state, replaced after each change.
///   Readers hold its lock only to fetch the snapshot, so a UI reading `currentCollection` waits
///   on no disk write, decoding or merge.
/// - `state.current` is an ``EngineStatus``: who is shown, the query followed and whether the
///   listener runs, as the last step left them.
///
/// A change runs in up to two steps on `queue`: the view (and every model whose decoded form is at
/// hand) first, then the models decoded in between. Nothing else changes the view meanwhile.
@usableFromInline
package final class SyncCore<T: SyncModel>: Sendable {
    typealias Sender = OutboxSender<WriteWaiter>

    @usableFromInline
    struct State {
        var view: LocalView
        /// The decoded models in path order, and their paths: a lookup is a binary search, which
        /// spares keeping a dictionary of generic models in step (the costliest part of a snapshot).
        var orderedPaths = ChunkedList<DocumentPath>()
        var ordered = ChunkedList<T>()
        /// Each model's revision: a number the model gets anew each time it is decoded from a
        /// changed document, so a snapshot's reader tells a modified document from the same one.
        var revisions = ChunkedList<UInt64>()
        var nextRevision: UInt64 = 1
        /// The listened query over those models: what a collection engine shows. Nil while no
        /// query is set, or when the query keeps every document in path order.
        var queryView: QueryView<T>?
        var documentID: String?
        /// The query a collection engine's listener follows, and its digest (saved with the resume
        /// version, which belongs to it).
        var query: Query?
        var queryDigest: String?
        /// The digest of the query the loaded resume version belongs to, until a query is set: the
        /// same query then resumes from it.
        var resumeQuery: String?
        var isFromCache = true
        // The sender: its rules, and the task sleeping out its backoff.
        var sender: Sender
        var flushRetry: Task<Void, Never>?
        // The listener: its rules (and the version it resumes after), and what they started.
        var listener: ListenerStateMachine
        var tasks = ListenerTasks()
        /// The generation of the last snapshot made for readers.
        var generation: UInt64 = 0
        /// Whose space the engine shows (nil: the signed-out one), where it is kept, and how many
        /// times the engine switched spaces: the answers to a window sent from an earlier space are
        /// not this space's to settle.
        var user: String?
        var persistence: EnginePersistence
        var space = 0
        /// Spaces left while the engine keeps nothing on disk, by user, to come back to.
        var memorySpaces: [String?: SpaceState] = [:]
    }

    let managerKey: String
    let logger: (any DataSyncLogger)?
    /// Where the outbox's depth and refused writes are reported, when the remote's client has
    /// metrics (``ClientMetrics``).
    let metrics: EngineMetrics?
    let clock: any Clock<Duration>
    let retryPolicy: RetryPolicy
    let randomness: RetryRandomness
    /// The persistence the engine was made with: the signed-out space's, which opens the others
    /// and remembers which was shown last. The space shown now is ``State/persistence``.
    let basePersistence: EnginePersistence
    /// Sends a window of write requests in order and answers each.
    let commit: @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
    /// Reads one document from the server, to learn the state a write answered `unknown` left.
    let refetch: (@Sendable (DocumentPath) async throws -> Document?)?
    /// Time elapsed on `clock` since the engine was made: the sender's deadlines.
    let elapsed: @Sendable () -> Duration
    /// The working state, owned by `queue`.
    let state: QueueOwned<State, EngineStatus>
    /// The writes the server refused for good, until the app dismisses them: a list of its own,
    /// which the owner adds to (and empties when it shows another user's space) and the app's
    /// dismissal takes from at once, from any thread.
    let rejected = Mutex<[RejectedWrite]>([])
    /// Observers of every change (the engines' streams, synced handles): a registry of its own,
    /// which any thread may join or leave.
    private let observers = Mutex<(next: Int, all: [Int: Observer])>((0, [:]))
    /// What readers see, replaced after each change.
    @usableFromInline let published: Mutex<Published>

    /// The snapshot readers see, and its shown models in one array once a reader made it: the
    /// common read (`currentCollection` between two changes) is one lock and one reference.
    @usableFromInline
    struct Published: Sendable {
        @usableFromInline var snapshot: EngineSnapshot<T>
        @usableFromInline var shown: [T]?
    }
    /// Runs every change of the view, with its persistence and decoding, in order; never a read.
    let queue: EngineQueue
    /// The remote's connection as its events said, for pass-through listeners to wait on.
    let connection = ConnectionSignal()
    /// Writes changes to the persistence in order, the server's state behind the caller's back.
    let cache: CacheWriter
    /// Called, outside the locks, after a change, with what it changed.
    let didChange: @Sendable (EngineChanges) -> Void

    init(
        managerKey: String, logger: (any DataSyncLogger)?, clock: any Clock<Duration>, retryPolicy: RetryPolicy,
        random: any RandomNumberGenerator & Sendable, persistence: EnginePersistence, space: OpenedSpace,
        commit: @escaping @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>],
        refetch: (@Sendable (DocumentPath) async throws -> Document?)? = nil,
        metrics: ClientMetrics? = nil,
        didChange: @escaping @Sendable (EngineChanges) -> Void
    ) {
        self.managerKey = managerKey
        self.metrics = metrics?.engine(managerKey)
        self.logger = logger
        self.clock = clock
        self.retryPolicy = retryPolicy
        self.randomness = RetryRandomness(random)
        self.basePersistence = persistence
        self.commit = commit
        self.refetch = refetch
        self.elapsed = Self.stopwatch(clock)
        self.didChange = didChange
        queue = EngineQueue(label: "tandem.engine.\(managerKey)")
        let logger = logger
        cache = CacheWriter { error in
            logger?.trackEvent(DataSyncLogEvent(name: "\(managerKey)_persist_fail", parameters: ["error_description": "\(error)"], severity: .severe))
        }
        // Entries loaded from disk count as sent: one may have reached the server before the app
        // stopped, so none is merged again. This is what spares a write to disk before each send.
        var outbox = space.state.outbox
        outbox.markAllAttempted()
        var initial = State(
            view: LocalView(base: space.state.documents, outbox: outbox, now: Date()), sender: Sender(policy: retryPolicy),
            listener: ListenerStateMachine(policy: retryPolicy, resumeVersion: space.state.resumeVersion),
            user: space.user, persistence: space.persistence
        )
        initial.documentID = space.state.documentID
        initial.resumeQuery = space.state.resumeQuery
        let failures = Self.rebuildModels(&initial, orderHint: space.state.documents)
        published = Mutex(Published(snapshot: Self.snapshot(of: &initial)))
        state = QueueOwned(initial, on: queue, status: { EngineStatus($0) })
        for (path, error) in failures { logDecodeFailure(path, error) }
        if let storage = persistence.storageName {
            EngineHandover.arrive(storage, on: queue) { [weak self] in self?.supersede() }
        }
    }

    /// Time elapsed on `clock` from now on.
    private static func stopwatch(_ clock: some Clock<Duration>) -> @Sendable () -> Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }

    /// The most writes per request and requests in flight the sender uses. For tests and
    /// benchmarks: both wait for the engine's executor.
    package var sendingLimits: (writesPerRequest: Int, requestsInFlight: Int) {
        get { queue.sync { state.access { ($0.sender.limits.writesPerRequest, $0.sender.limits.requestsInFlight) } } }
        set { queue.sync { state.access { $0.sender.limits = .init(writesPerRequest: newValue.writesPerRequest, requestsInFlight: newValue.requestsInFlight) } } }
    }

    /// Returns once every step queued before has run (suspending meanwhile): for tests and
    /// simulations that check the engine after the changes they caused.
    package func barrier() async {
        await queue.run {}
    }

    /// Runs `body` on the working state on its owner, after every change queued before, blocking
    /// the caller meanwhile: for tests and benchmarks that look inside, never for an app's calls.
    func onOwner<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try queue.sync { try state.access(body) }
    }

    /// The retry policy's delay after `failures` failures in a row, with its jitter.
    func retryDelay(afterFailures failures: Int) -> Duration? {
        randomness.delay(retryPolicy, afterFailures: failures)
    }

    // MARK: Events

    func log(_ event: String, _ parameters: @autoclosure () -> [String: any Sendable] = [:], severity: DataSyncLogEvent.Severity = .info) {
        // The parameters are made only for a logger.
        guard let logger else { return }
        logger.trackEvent(DataSyncLogEvent(name: "\(managerKey)_\(event)", parameters: parameters(), severity: severity))
    }

    /// A document that no longer decodes into the model: it stays out of the models, and says so.
    func logDecodeFailure(_ path: DocumentPath, _ error: any Error) {
        log("decode_fail", ["document_id": path.id, "error_description": "\(error)"], severity: .severe)
    }

    /// A write to the engine's persistence that failed: the in-memory state goes on, said loudly.
    func logPersistFailure(_ error: any Error) {
        log("persist_fail", ["error_description": "\(error)"], severity: .severe)
    }

    /// The state readers see: the snapshot the last change published.
    var snapshot: EngineSnapshot<T> { published.withLock { $0.snapshot } }

    /// What the engine shows: the listened query's answer over the models, or every model in
    /// path order.
    @inlinable package var shown: [T] {
        if let shown = published.withLock({ $0.shown }) { return shown }
        return makeShown()
    }

    /// The first read of a snapshot's shown models: made outside the lock, kept for the next reads.
    @usableFromInline func makeShown() -> [T] {
        let snapshot = self.snapshot
        let shown = snapshot.shown
        published.withLock { published in
            if published.snapshot === snapshot { published.shown = shown }
        }
        return shown
    }

    /// The shown documents' paths and models, in order.
    var shownDocuments: [(path: DocumentPath, model: T)] { snapshot.shownDocuments }

    /// The shown model at `path`, or nil.
    func shownModel(at path: DocumentPath) -> T? { snapshot.shownModel(at: path) }

    func model(at path: DocumentPath) -> T? { snapshot.model(at: path) }

    /// The shown models whose path passes a predicate.
    func shownModels(where predicate: (DocumentPath) -> Bool) -> [T] {
        shownDocuments.filter { predicate($0.path) }.map(\.model)
    }

    func metadata(at path: DocumentPath) -> DocumentMetadata { snapshot.metadata(at: path) }

    var pendingWriteCount: Int { snapshot.pendingWrites.count }

    /// Forgets a rejected write the app has dealt with (shown the user, say), or every one with
    /// nil: they leave `rejectedWrites` at once. Only the list changes; the writes were rolled back
    /// when refused.
    func dismissRejected(_ write: RejectedWrite?) {
        let dismissed = rejected.withLock { rejected -> Bool in
            guard let write else {
                defer { rejected = [] }
                return !rejected.isEmpty
            }
            guard let index = rejected.firstIndex(of: write) else { return false }
            rejected.remove(at: index)
            return true
        }
        if dismissed { tellObservers([.rejectedWrites]) }
    }
    var pendingWrites: [PendingWrite] { snapshot.pendingWrites.array }
    var rejectedWrites: [RejectedWrite] { rejected.withLock { $0 } }
    var isFromCache: Bool { snapshot.isFromCache }

    /// A snapshot of the working state for readers, in its locked step: shares its lists.
    static func snapshot(of state: inout State) -> EngineSnapshot<T> {
        state.generation += 1
        return EngineSnapshot(
            generation: state.generation, paths: state.orderedPaths, models: state.ordered, revisions: state.revisions, query: state.queryView,
            pendingWrites: state.view.entries, isFromCache: state.isFromCache,
            documentID: state.documentID, space: state.space)
    }

    /// Publishes the working state to readers; on `queue`, like every step on the state. Returns
    /// the snapshot it replaced, freed (if no reader holds it) where the caller drops it: a local
    /// write drops it once its caller is resumed.
    @discardableResult
    func publish() -> Retired? {
        let snapshot = state.access { Self.snapshot(of: &$0) }
        // Reported before readers see the snapshot, newest last, under a lock no reader takes.
        if let metrics {
            metrics.reported.withLock { reported in
                guard snapshot.generation > reported else { return }
                reported = snapshot.generation
                metrics.outboxDepth.record(snapshot.pendingWrites.count)
            }
        }
        let replaced = published.withLock { published -> Published? in
            guard snapshot.generation > published.snapshot.generation else { return nil }
            // A change that left the shown models as they were keeps the array a reader made of them.
            defer { published = Published(snapshot: snapshot, shown: snapshot.showsSame(as: published.snapshot) ? published.shown : nil) }
            return published
        }
        // The old snapshot is freed outside the lock.
        return replaced.map(Retired.init)
    }

    /// A snapshot readers no longer get: freeing it frees the lists' chunks that later steps copied.
    struct Retired {
        fileprivate let published: Published
    }

    /// Observers of every change, for the engines' streams. Returns a token for `removeObserver`.
    func addObserver(_ observer: @escaping @Sendable () -> Void) -> Int {
        observers.withLock { observers in
            observers.next += 1
            observers.all[observers.next] = Observer(observer)
            return observers.next
        }
    }

    func removeObserver(_ token: Int) {
        _ = observers.withLock { $0.all.removeValue(forKey: token) }
    }

    /// An observer's closure in a class box: kept directly in a `Mutex`, it would be re-wrapped in
    /// a thunk on every access.
    final class Observer: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    /// Runs a write to the engine's persistence now, after every change queued before it, outside
    /// the state's lock (on `queue`). A failure is logged as `persist_fail`: the in-memory
    /// state goes on, and it is never dropped silently. Returns whether it was written.
    @discardableResult
    func store(_ write: LocalWrite) -> Bool {
        do {
            try cache.run(write)
            return true
        } catch {
            logPersistFailure(error)
            return false
        }
    }

    /// Queues a write of the server's state, which no caller waits for (see ``CacheWriter``).
    /// Called on `queue`, so it is written in the order of the changes.
    func storeLater(_ write: LocalWrite) {
        cache.enqueue(write)
    }

    /// Writes every queued change of the server's state now: for tests that read the persistence.
    package func flushCache() {
        cache.flush()
    }

    /// Publishes the state and tells observers what changed; on `queue`, after the change.
    @discardableResult
    func notifyChanged(_ changes: EngineChanges) -> Retired? {
        let retired = publish()
        tellObservers(changes)
        return retired
    }

    /// Tells observers what changed, on the calling thread.
    func tellObservers(_ changes: EngineChanges) {
        let observers = observers.withLock { Array($0.all.values) }
        didChange(changes)
        observers.forEach { $0.call() }
    }
}

extension SyncCore {
    /// Drops the cached documents (memory and disk); pending writes stay in the view and the outbox.
    /// Queued on the engine's executor: the caller (an app's synchronous `stopListening()`) goes on
    /// at once, and the cache is gone before any change asked for after it.
    func clearDocuments(forgetDocumentID: Bool = false) {
        queue.enqueue { [self] in clearDocumentsOnQueue(forgetDocumentID: forgetDocumentID) }
    }

    /// ``clearDocuments(forgetDocumentID:)``'s step, run on `queue`.
    func clearDocumentsOnQueue(forgetDocumentID: Bool = false) {
        let (write, undecided) = state.access { state -> (LocalWrite, [Document]) in
            if forgetDocumentID { state.documentID = nil }
            state.view.clearBase(now: Date())
            state.listener.forgetResumeVersion()
            state.isFromCache = true
            var change = LocalCollectionChange()
            change.replacesAllDocuments = true
            // The resume point belongs to the documents dropped: kept, a listener started later
            // (after a relaunch, or back in this user's data) would resume from it and never be
            // sent the documents that did not change since.
            change.forgetsResumePoint = true
            let write = state.persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: nil)
            return (write, Self.pruneModels(in: &state))
        }
        store(write)
        installModels(undecided)
        notifyChanged([.documents, .isFromCache])
    }

    /// After the base was dropped, in a locked step: the models of documents that went go too.
    /// Returns what pending writes still show, to decode again.
    static func pruneModels(in state: inout State) -> [Document] {
        let documents = state.view.documents
        var paths = ChunkedList<DocumentPath>()
        var models = ChunkedList<T>()
        var revisions = ChunkedList<UInt64>()
        for ((path, model), revision) in zip(zip(state.orderedPaths, state.ordered), state.revisions) where documents[path] != nil {
            paths.append(path)
            models.append(model)
            revisions.append(revision)
        }
        state.orderedPaths = paths
        state.ordered = models
        state.revisions = revisions
        refreshQueryView(nil, in: &state)
        return Array(documents.values)
    }

    var documentID: String? { snapshot.documentID }

    /// Points a document engine at another document: the old cached document goes, its pending
    /// writes stay. Returns whether the id changed. Run on `queue`.
    func switchDocumentOnQueue(to id: String) -> Bool {
        let change = state.access { state -> (LocalWrite, [Document])? in
            guard state.documentID != id else { return nil }
            state.documentID = id
            state.view.clearBase(now: Date())
            state.listener.forgetResumeVersion()
            state.isFromCache = true
            let write = state.persistence.write(LocalCollectionChange(), view: state.view, documentID: id, resumeVersion: nil)
            return (write, Self.pruneModels(in: &state))
        }
        guard let (write, undecided) = change else { return false }
        store(write)
        installModels(undecided)
        notifyChanged([.documents, .isFromCache])
        return true
    }
}


/// What any thread may know of an engine's working state without waiting for its executor: the
/// facts its last step left, published by the owner (``QueueOwned``).
struct EngineStatus: Equatable, Sendable {
    /// The query the listener follows, and its digest (what tells two queries apart here).
    var query: Query?
    var queryDigest: String?
    /// Whose space is shown (nil: the signed-out one), and how many times the engine switched.
    var user: String?
    var space: Int
    var isListening: Bool
    /// Whether a listener runs and is up (not waiting out a backoff).
    var isListenerUp: Bool
    var isShutDown: Bool

    init<T>(_ state: SyncCore<T>.State) {
        query = state.query
        queryDigest = state.queryDigest
        user = state.user
        space = state.space
        isListening = state.listener.isRunning
        isListenerUp = state.listener.isUp
        isShutDown = state.tasks.isShutDown
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.space == rhs.space && lhs.isListening == rhs.isListening && lhs.isListenerUp == rhs.isListenerUp
            && lhs.isShutDown == rhs.isShutDown && lhs.queryDigest == rhs.queryDigest && lhs.user == rhs.user
            && (lhs.query == nil) == (rhs.query == nil)
    }
}

/// What one change of an engine's state touched, so observers of the other properties are not
/// woken by it.
struct EngineChanges: OptionSet, Sendable {
    let rawValue: Int
    /// The documents shown (`currentCollection`, `currentDocument`).
    static let documents = EngineChanges(rawValue: 1)
    /// The outbox (`pendingWrites`, `hasPendingWrites`, per-document metadata).
    static let pendingWrites = EngineChanges(rawValue: 2)
    static let rejectedWrites = EngineChanges(rawValue: 4)
    static let isFromCache = EngineChanges(rawValue: 8)
}
