import Foundation
import Synchronization
import TandemCore

/// The machinery the three engines share: the local view and its decoded models, the outbox and
/// its single in-order sender, the listener with retry, persistence and analytics events.
///
/// One serial executor and two locks, each lock taken only inside the one before it:
/// - `queue` (an ``EngineQueue``) runs every change of the view with its persistence, one at a
///   time, so the durable order of outbox entries is the in-memory order. Disk writes and decoding
///   run there, on a thread of the engine's own: the connection's reader and an app's synchronous
///   calls only queue changes, and async callers are suspended while theirs runs, never blocked.
/// - `state` guards the working state: the view, the models, the listener's and the sender's
///   machines. It is held for in-memory steps only; no reader takes it.
/// - `published` holds what readers see: an immutable ``EngineSnapshot`` of the state, replaced
///   after each change. Readers hold it only to fetch the snapshot, so a UI reading
///   `currentCollection` waits on no disk write, decoding or merge.
///
/// A change runs in up to two locked steps on `queue`: the view (and every model whose decoded
/// form is at hand) first, then the models decoded outside the lock. Nothing else changes the
/// view in between.
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
        var rejected: [RejectedWrite] = []
        // The sender: its rules, and the task sleeping out its backoff.
        var sender: Sender
        var flushRetry: Task<Void, Never>?
        // The listener: its rules (and the version it resumes after), and what they started.
        var listener: ListenerStateMachine
        var tasks = ListenerTasks()
        var observers: [Int: @Sendable () -> Void] = [:]
        var nextObserver = 0
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
    let state: Mutex<State>
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
        state = Mutex(initial)
        for (path, error) in failures { logDecodeFailure(path, error) }
    }

    /// Time elapsed on `clock` from now on.
    private static func stopwatch(_ clock: some Clock<Duration>) -> @Sendable () -> Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }

    /// The most writes per request and requests in flight the sender uses.
    package var sendingLimits: (writesPerRequest: Int, requestsInFlight: Int) {
        get { state.withLock { ($0.sender.limits.writesPerRequest, $0.sender.limits.requestsInFlight) } }
        set { state.withLock { $0.sender.limits = .init(writesPerRequest: newValue.writesPerRequest, requestsInFlight: newValue.requestsInFlight) } }
    }

    /// The retry policy's delay after `failures` failures in a row, with its jitter.
    func retryDelay(afterFailures failures: Int) -> Duration? {
        randomness.delay(retryPolicy, afterFailures: failures)
    }

    // MARK: Events

    func log(_ event: String, _ parameters: [String: any Sendable] = [:], severity: DataSyncLogEvent.Severity = .info) {
        logger?.trackEvent(DataSyncLogEvent(name: "\(managerKey)_\(event)", parameters: parameters, severity: severity))
    }

    /// A document that no longer decodes into the model: it stays out of the models, and says so.
    func logDecodeFailure(_ path: DocumentPath, _ error: any Error) {
        log("decode_fail", ["document_id": path.id, "error_description": "\(error)"], severity: .severe)
    }

    /// A write to the engine's persistence that failed: the in-memory state goes on, said loudly.
    func logPersistFailure(_ error: any Error) {
        log("persist_fail", ["error_description": "\(error)"], severity: .severe)
    }

    // MARK: Models

    /// Decodes a document into a model; the document id fills a missing `id` field.
    static func decodeModel(_ document: Document) throws -> T {
        try JSONValueDecoder().decode(T.self, from: document.data, defaultID: document.path.id)
    }

    /// Decodes a document into a model, or logs `decode_fail` with its id and returns nil.
    func decode(_ document: Document) -> T? {
        do {
            return try Self.decodeModel(document)
        } catch {
            logDecodeFailure(document.path, error)
            return nil
        }
    }

    /// Decodes every view document, returning those that failed. `orderHint` holds the cached
    /// documents as the persistence read them, probably in path order: with no pending write on
    /// top they are the view itself, taken as they are (no lookup per document), and checking
    /// their order costs one pass where sorting would cost n log n. A large cache is decoded on
    /// two cores. For a state no reader sees yet (an engine being made).
    static func rebuildModels(_ state: inout State, orderHint: [Document] = []) -> [(DocumentPath, any Error)] {
        var documents: [Document]
        if state.view.outbox.isEmpty && orderHint.count == state.view.documents.count {
            documents = orderHint
        } else {
            documents = Array(state.view.documents.values)
        }
        if !zip(documents, documents.dropFirst()).allSatisfy({ $0.path < $1.path }) {
            documents.sort { $0.path < $1.path }
        }
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var failures: [(DocumentPath, any Error)] = []
        if documents.count >= 4_096 {
            let half = documents.count / 2
            var tail: (paths: [DocumentPath], models: [T], failures: [(DocumentPath, any Error)]) = ([], [], [])
            Parallel.both({
                (orderedPaths, ordered, failures) = decodeModels(documents[..<half])
            }, {
                tail = decodeModels(documents[half...])
            })
            orderedPaths.append(contentsOf: tail.paths)
            ordered.append(contentsOf: tail.models)
            failures.append(contentsOf: tail.failures)
        } else {
            (orderedPaths, ordered, failures) = decodeModels(documents[...])
        }
        // Adopted whole: a cold start's models are shown as they are, without a copy.
        state.orderedPaths = ChunkedList(adopting: orderedPaths)
        state.ordered = ChunkedList(adopting: ordered)
        state.revisions = newRevisions(ordered.count, in: &state)
        return failures
    }

    /// The models of `documents` in their order, with their paths, and those that did not decode.
    private static func decodeModels(_ documents: ArraySlice<Document>) -> ([DocumentPath], [T], [(DocumentPath, any Error)]) {
        var paths: [DocumentPath] = []
        var models: [T] = []
        var failures: [(DocumentPath, any Error)] = []
        paths.reserveCapacity(documents.count)
        models.reserveCapacity(documents.count)
        for document in documents {
            do {
                models.append(try decodeModel(document))
                paths.append(document.path)
            } catch {
                failures.append((document.path, error))
            }
        }
        return (paths, models, failures)
    }

    /// Brings the models of `paths` in line with the view, in a locked step: a path whose document
    /// went loses its model, one whose decoded model is at hand (`prepared`) gets it. Returns the
    /// documents left to decode (after the lock, with ``installModels(_:)``); their models stay as
    /// they were until then.
    static func refreshModels(_ paths: [DocumentPath], in state: inout State, prepared: PreparedModels? = nil) -> [Document] {
        let decided = decideModels(paths, from: state.view, prepared: prepared)
        place(decided, into: &state)
        return decided.undecided
    }

    /// Decodes documents found by ``refreshModels(_:in:prepared:)`` outside the state's lock, then
    /// puts their models in place. Called on `queue`, so the view still shows them.
    func installModels(_ documents: [Document]) {
        guard !documents.isEmpty else { return }
        var fresh = DecodedModels()
        for document in documents.sorted(by: { $0.path < $1.path }) {
            fresh.changed.append(document.path)
            if let model = decode(document) {
                fresh.paths.append(document.path)
                fresh.models.append(model)
            }
        }
        let placed = state.withLock { state -> Bool in
            // Nothing changes the view outside `queue`; checked all the same, as it is cheap.
            guard documents.allSatisfy({ state.view.documents[$0.path] == $0 }) else { return false }
            Self.place(fresh, into: &state)
            return true
        }
        if !placed {
            log("models_stale", ["count": documents.count], severity: .severe)
        }
    }

    /// Models decoded from a batch's documents before its locked step (while later pieces were
    /// still arriving, or just before), in the batch's order. Each stands for the view's document
    /// as long as the view shows that very version of it with no pending write on top (a server
    /// version of a document never changes).
    struct PreparedModels {
        /// Every change's path and document version.
        var paths: [DocumentPath] = []
        var versions: [Version?] = []
        /// Each change's index in `models`, or -1 when its document did not decode (or was none).
        var modelIndex: [Int] = []
        var modelPaths: [DocumentPath] = []
        var models: [T] = []
        /// Documents that did not decode, to log once the batch is applied.
        var failures: [(DocumentPath, any Error)] = []
        /// Whether `modelPaths` is strictly increasing (checked as they come, while at hand).
        private(set) var inPathOrder = true

        init() {}

        /// When set, a model stands for the view's document only when that is this very document,
        /// pending writes or not: for models of what a local write will show.
        private(set) var exactDocuments: [Document]?

        init(_ changes: [RemoteChange]) {
            add(changes)
        }

        /// The models of documents the view is about to show, pending writes included.
        init(showing documents: [Document]) {
            add(documents.map { RemoteChange(path: $0.path, document: $0, version: $0.version) })
            exactDocuments = documents
        }

        /// Whether the prepared change at `index` stands for `document`, shown by `view`.
        func stands(_ index: Int, for document: Document, in view: LocalView, anyPending: Bool) -> Bool {
            if let exactDocuments { return exactDocuments[index] == document }
            return versions[index] == document.version && (!anyPending || !view.hasPendingWrites(document.path))
        }

        mutating func add(_ changes: [RemoteChange]) {
            for change in changes {
                paths.append(change.path)
                versions.append(change.document?.version)
                guard let document = change.document else {
                    modelIndex.append(-1)
                    continue
                }
                do {
                    let model = try decodeModel(document)
                    if inPathOrder, let last = modelPaths.last, !(last < change.path) { inPathOrder = false }
                    modelIndex.append(models.count)
                    modelPaths.append(change.path)
                    models.append(model)
                } catch {
                    modelIndex.append(-1)
                    failures.append((change.path, error))
                }
            }
        }
    }

    /// Models for a merge: the paths whose model is decided (gone, or fresh), the fresh ones in path
    /// order, and the documents still to decode.
    struct DecodedModels {
        var changed: [DocumentPath] = []
        var paths: [DocumentPath] = []
        var models: [T] = []
        var undecided: [Document] = []
    }

    /// Decides the models of the view's documents at `paths` from what is prepared, without decoding.
    static func decideModels(_ paths: [DocumentPath], from view: LocalView, prepared: PreparedModels?) -> DecodedModels {
        // Sort the paths, not (path, model) pairs (moving generic models is slow), and only when
        // they do not come sorted already (strictly increasing also means no repeats).
        var sorted = paths
        if !zip(paths, paths.dropFirst()).allSatisfy({ $0 < $1 }) {
            sorted = Set(paths).sorted()
        }
        // Prepared models line up with the batch when the paths are the batch's own (a snapshot,
        // or a batch of distinct documents in path order); otherwise they are looked up.
        let aligned = prepared.map { $0.paths.count == sorted.count && $0.paths == sorted } ?? false
        var lookup: [DocumentPath: Int] = [:]
        if let prepared, !aligned {
            lookup.reserveCapacity(prepared.paths.count)
            for (index, path) in prepared.paths.enumerated() { lookup[path] = index }
        }
        let documents = view.documents
        let anyPending = view.hasPendingWrites
        var decided = DecodedModels()
        // Two arrays rather than one of (path, model) pairs: generic tuples copy slowly.
        decided.changed.reserveCapacity(sorted.count)
        decided.paths.reserveCapacity(sorted.count)
        decided.models.reserveCapacity(sorted.count)
        for (position, path) in sorted.enumerated() {
            guard let document = documents[path] else {
                decided.changed.append(path)
                continue
            }
            if let prepared, let index = aligned ? position : lookup[path],
               prepared.stands(index, for: document, in: view, anyPending: anyPending) {
                decided.changed.append(path)
                let model = prepared.modelIndex[index]
                if model >= 0 {
                    decided.paths.append(path)
                    decided.models.append(prepared.models[model])
                }
            } else {
                decided.undecided.append(document)
            }
        }
        return decided
    }

    /// Puts decided models in place of those of their paths, keeping path order, and moves them in
    /// the query's view.
    static func place(_ fresh: DecodedModels, into state: inout State) {
        placeModels(fresh, into: &state)
        refreshQueryView(fresh.changed, in: &state)
    }

    /// Brings the query's view in line with the models of `changed` (nil: of every path).
    static func refreshQueryView(_ changed: [DocumentPath]?, in state: inout State) {
        guard state.queryView != nil else { return }
        // Local copies share storage with the state's arrays, which do not change meanwhile; the
        // view is changed in place, so its arrays are not copied.
        let paths = state.orderedPaths
        let models = state.ordered
        let revisions = state.revisions
        let documents = state.view.documents
        // A few paths, or a small share of them all, move one by one (a search and a splice each);
        // more are cheaper in one pass over every model.
        guard let changed, Self.placesOneByOne(changed.count, of: paths.count) else {
            state.queryView!.rebuild(documents: documents, paths: paths, models: models, revisions: revisions)
            return
        }
        state.queryView!.update(changed, documents: documents) { path in
            let index = binarySearch(paths, path)
            return index < paths.count && paths[index] == path ? (models[index], revisions[index]) : nil
        }
    }

    /// Points the view at the listened query (nil shows every model in path order). Returns
    /// whether what is shown may have changed.
    static func setQueryView(_ query: Query, in state: inout State) -> Bool {
        let view = QueryView<T>(query)
        if view == nil && state.queryView == nil { return false }
        state.queryView = view
        refreshQueryView(nil, in: &state)
        return true
    }

    private static func placeModels(_ fresh: DecodedModels, into state: inout State) {
        // Many paths at once (a snapshot, a large batch): one merge pass instead of an insertion
        // each, which would be quadratic.
        if !placesOneByOne(fresh.changed.count, of: state.orderedPaths.count) {
            merge(fresh, into: &state)
            return
        }
        var next = 0
        for path in fresh.changed {
            let model: T?
            if next < fresh.paths.count && fresh.paths[next] == path {
                model = fresh.models[next]
                next += 1
            } else {
                model = nil
            }
            let index = binarySearch(state.orderedPaths, path)
            let present = index < state.orderedPaths.count && state.orderedPaths[index] == path
            switch (model, present) {
            case (let model?, true):
                state.ordered[index] = model
                state.revisions[index] = state.nextRevision
                state.nextRevision += 1
            case (let model?, false):
                state.orderedPaths.insert(path, at: index)
                state.ordered.insert(model, at: index)
                state.revisions.insert(state.nextRevision, at: index)
                state.nextRevision += 1
            case (nil, true):
                state.orderedPaths.remove(at: index)
                state.ordered.remove(at: index)
                state.revisions.remove(at: index)
            case (nil, false):
                break
            }
        }
    }

    /// Whether `changed` paths among `total` are cheaper to place one by one (a binary search and a
    /// splice of one chunk each) than in a pass over all of them (which hashes every path).
    static func placesOneByOne(_ changed: Int, of total: Int) -> Bool {
        changed <= 64 || changed * 3 <= total
    }

    /// Puts decided models in place of those of their paths in one pass.
    static func merge(_ fresh: DecodedModels, into state: inout State) {
        if state.orderedPaths.isEmpty {
            // Nothing to merge with (a first snapshot): the fresh models are the whole list.
            state.orderedPaths = ChunkedList(adopting: fresh.paths)
            state.ordered = ChunkedList(adopting: fresh.models)
            state.revisions = newRevisions(fresh.models.count, in: &state)
            return
        }
        // Built flat and adopted whole: a merge is O(n) anyway, and the first single change after it
        // pays one more pass to cut the lists into chunks.
        let changed = Set(fresh.changed)
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var revisions: [UInt64] = []
        orderedPaths.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        ordered.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        revisions.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        var next = 0
        var kept = zip(state.orderedPaths, state.ordered).makeIterator()
        var keptRevisions = state.revisions.makeIterator()
        while let (path, model) = kept.next(), let revision = keptRevisions.next() {
            guard !changed.contains(path) else { continue }
            while next < fresh.paths.count && fresh.paths[next] < path {
                orderedPaths.append(fresh.paths[next])
                ordered.append(fresh.models[next])
                revisions.append(state.nextRevision)
                state.nextRevision += 1
                next += 1
            }
            orderedPaths.append(path)
            ordered.append(model)
            revisions.append(revision)
        }
        for index in next..<fresh.paths.count {
            orderedPaths.append(fresh.paths[index])
            ordered.append(fresh.models[index])
            revisions.append(state.nextRevision)
            state.nextRevision += 1
        }
        state.orderedPaths = ChunkedList(adopting: orderedPaths)
        state.ordered = ChunkedList(adopting: ordered)
        state.revisions = ChunkedList(adopting: revisions)
    }

    /// `count` new revisions, in order.
    static func newRevisions(_ count: Int, in state: inout State) -> ChunkedList<UInt64> {
        let first = state.nextRevision
        state.nextRevision += UInt64(count)
        return ChunkedList(adopting: Array(first..<state.nextRevision))
    }

    static func binarySearch(_ paths: ChunkedList<DocumentPath>, _ path: DocumentPath) -> Int {
        paths.partitionIndex { $0 < path }
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
    /// nil: they leave `rejectedWrites`. Only the list changes; the writes were rolled back when
    /// refused.
    func dismissRejected(_ write: RejectedWrite?) {
        let dismissed = state.withLock { state -> Bool in
            guard let write else {
                defer { state.rejected = [] }
                return !state.rejected.isEmpty
            }
            guard let index = state.rejected.firstIndex(of: write) else { return false }
            state.rejected.remove(at: index)
            return true
        }
        if dismissed { notifyChanged([.rejectedWrites]) }
    }
    var pendingWrites: [PendingWrite] { snapshot.pendingWrites.array }
    var rejectedWrites: [RejectedWrite] { snapshot.rejectedWrites }
    var isFromCache: Bool { snapshot.isFromCache }

    /// A snapshot of the working state for readers, in its locked step: shares its lists.
    static func snapshot(of state: inout State) -> EngineSnapshot<T> {
        state.generation += 1
        return EngineSnapshot(
            generation: state.generation, paths: state.orderedPaths, models: state.ordered, revisions: state.revisions, query: state.queryView,
            pendingWrites: state.view.entries, rejectedWrites: state.rejected, isFromCache: state.isFromCache,
            documentID: state.documentID)
    }

    /// Publishes the working state to readers. A snapshot made earlier never replaces a later one,
    /// whatever order two publishers get here in.
    func publish() {
        let snapshot = state.withLock { Self.snapshot(of: &$0) }
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
        // The old snapshot is freed here, outside the lock, if no reader holds it.
        withExtendedLifetime(replaced) {}
    }

    /// Observers of every change, for the engines' streams. Returns a token for `removeObserver`.
    func addObserver(_ observer: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            state.nextObserver += 1
            state.observers[state.nextObserver] = observer
            return state.nextObserver
        }
    }

    func removeObserver(_ token: Int) {
        _ = state.withLock { $0.observers.removeValue(forKey: token) }
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

    func notifyChanged(_ changes: EngineChanges) {
        publish()
        let observers = state.withLock { Array($0.observers.values) }
        didChange(changes)
        observers.forEach { $0() }
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
        let (write, undecided) = state.withLock { state -> (LocalWrite, [Document]) in
            if forgetDocumentID { state.documentID = nil }
            state.view.clearBase(now: Date())
            state.listener.forgetResumeVersion()
            state.isFromCache = true
            var change = LocalCollectionChange()
            change.replacesAllDocuments = true
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
        let change = state.withLock { state -> (LocalWrite, [Document])? in
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
