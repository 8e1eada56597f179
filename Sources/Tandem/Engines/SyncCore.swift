import Foundation
import Synchronization
import TandemCore

/// The machinery the three engines share: the local view and its decoded models, the outbox and
/// its single in-order sender, the listener with retry, persistence and analytics events.
///
/// Two locks, never held together the other way round:
/// - `serial` orders every change of the view with its persistence, so the durable order of outbox
///   entries is the in-memory order. Only changes take it; it is held across disk writes and decoding.
/// - `state` guards the values readers see. It is held for in-memory steps only: no fsync, SQLite
///   write or decode ever runs under it, so a UI reading `currentCollection` never waits on disk.
///
/// A change runs in up to two locked steps inside `serial`: the view (and every model whose decoded
/// form is at hand) first, then the models decoded outside the lock. Nothing else changes the
/// view in between.
@usableFromInline
package final class SyncCore<T: SyncModel>: Sendable {
    typealias Sender = OutboxSender<CheckedContinuation<WriteOutcome, Never>>

    @usableFromInline
    struct State {
        var view: LocalView
        /// The decoded models in path order, and their paths: a lookup is a binary search, which
        /// spares keeping a dictionary of generic models in step (the costliest part of a snapshot).
        var orderedPaths: [DocumentPath] = []
        @usableFromInline var ordered: [T] = []
        /// The listened query over those models: what a collection engine shows. Nil while no
        /// query is set, or when the query keeps every document in path order.
        @usableFromInline var queryView: QueryView<T>?
        var documentID: String?
        /// The query a collection engine's listener follows.
        var query: Query?
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
    }

    let managerKey: String
    let logger: (any DataSyncLogger)?
    let clock: any Clock<Duration>
    let retryPolicy: RetryPolicy
    let randomness: RetryRandomness
    let persistence: EnginePersistence
    /// Sends a window of write requests in order and answers each.
    let commit: @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
    /// Reads one document from the server, to learn the state a write answered `unknown` left.
    let refetch: (@Sendable (DocumentPath) async throws -> Document?)?
    /// Time elapsed on `clock` since the engine was made: the sender's deadlines.
    let elapsed: @Sendable () -> Duration
    @usableFromInline let state: Mutex<State>
    /// Held by every change of the view, across its persistence and decoding; never by a reader.
    let serial = Mutex<Void>(())
    /// Called, outside the locks, after a change, with what it changed.
    let didChange: @Sendable (EngineChanges) -> Void

    init(
        managerKey: String, logger: (any DataSyncLogger)?, clock: any Clock<Duration>, retryPolicy: RetryPolicy,
        random: any RandomNumberGenerator & Sendable, persistence: EnginePersistence, base: [Document], outbox: Outbox, documentID: String?, resumeVersion: Version?,
        commit: @escaping @Sendable ([WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>],
        refetch: (@Sendable (DocumentPath) async throws -> Document?)? = nil,
        didChange: @escaping @Sendable (EngineChanges) -> Void
    ) {
        self.managerKey = managerKey
        self.logger = logger
        self.clock = clock
        self.retryPolicy = retryPolicy
        self.randomness = RetryRandomness(random)
        self.persistence = persistence
        self.commit = commit
        self.refetch = refetch
        self.elapsed = Self.stopwatch(clock)
        self.didChange = didChange
        // Entries loaded from disk count as sent: one may have reached the server before the app
        // stopped, so none is merged again. This is what spares a write to disk before each send.
        var outbox = outbox
        outbox.markAllAttempted()
        var initial = State(
            view: LocalView(base: base, outbox: outbox, now: Date()), sender: Sender(policy: retryPolicy),
            listener: ListenerStateMachine(policy: retryPolicy, resumeVersion: resumeVersion)
        )
        initial.documentID = documentID
        let failures = Self.rebuildModels(&initial, orderHint: base.map(\.path))
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

    /// Decodes every view document, returning those that failed. `orderHint` lists paths in the
    /// order they probably sort in (the persistence's order); checking that order costs one pass,
    /// where sorting would cost n log n. For a state no reader sees yet (an engine being made).
    static func rebuildModels(_ state: inout State, orderHint: [DocumentPath] = []) -> [(DocumentPath, any Error)] {
        var paths = orderHint.filter { state.view.documents[$0] != nil }
        if paths.count != state.view.documents.count {
            paths = Array(state.view.documents.keys)
        }
        if !zip(paths, paths.dropFirst()).allSatisfy({ $0 < $1 }) {
            paths.sort()
        }
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var failures: [(DocumentPath, any Error)] = []
        orderedPaths.reserveCapacity(paths.count)
        ordered.reserveCapacity(paths.count)
        for path in paths {
            guard let document = state.view.documents[path] else { continue }
            do {
                ordered.append(try decodeModel(document))
                orderedPaths.append(path)
            } catch {
                failures.append((path, error))
            }
        }
        state.orderedPaths = orderedPaths
        state.ordered = ordered
        return failures
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
    /// puts their models in place. Called inside `serial`, so the view still shows them.
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
            // Nothing changes the view outside `serial`; checked all the same, as it is cheap.
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
        let documents = state.view.documents
        guard let changed, changed.count <= 64 else {
            state.queryView!.rebuild(documents: documents, paths: paths, models: models)
            return
        }
        state.queryView!.update(changed, documents: documents) { path in
            let index = binarySearch(paths, path)
            return index < paths.count && paths[index] == path ? models[index] : nil
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
        if fresh.changed.count > 64 {
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
            case (let model?, false):
                state.orderedPaths.insert(path, at: index)
                state.ordered.insert(model, at: index)
            case (nil, true):
                state.orderedPaths.remove(at: index)
                state.ordered.remove(at: index)
            case (nil, false):
                break
            }
        }
    }

    /// Puts decided models in place of those of their paths in one pass.
    static func merge(_ fresh: DecodedModels, into state: inout State) {
        if state.orderedPaths.isEmpty {
            // Nothing to merge with (a first snapshot): the fresh models are the whole list.
            state.orderedPaths = fresh.paths
            state.ordered = fresh.models
            return
        }
        let changed = Set(fresh.changed)
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        orderedPaths.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        ordered.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        var next = 0
        for index in state.orderedPaths.indices where !changed.contains(state.orderedPaths[index]) {
            let path = state.orderedPaths[index]
            while next < fresh.paths.count && fresh.paths[next] < path {
                orderedPaths.append(fresh.paths[next])
                ordered.append(fresh.models[next])
                next += 1
            }
            orderedPaths.append(path)
            ordered.append(state.ordered[index])
        }
        orderedPaths.append(contentsOf: fresh.paths[next...])
        ordered.append(contentsOf: fresh.models[next...])
        state.orderedPaths = orderedPaths
        state.ordered = ordered
    }

    static func binarySearch(_ paths: [DocumentPath], _ path: DocumentPath) -> Int {
        var low = 0
        var high = paths.count
        while low < high {
            let middle = (low + high) / 2
            if paths[middle] < path { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// What the engine shows: the listened query's answer over the models, or every model in
    /// path order.
    @inlinable
    package var shown: [T] { state.withLock { $0.queryView?.shown ?? $0.ordered } }

    /// The shown documents' paths and models, in order.
    var shownDocuments: [(path: DocumentPath, model: T)] {
        state.withLock { state in
            guard let view = state.queryView else { return zip(state.orderedPaths, state.ordered).map { ($0, $1) } }
            return zip(view.shownPaths, view.shown).map { ($0, $1) }
        }
    }

    /// The shown model at `path`, or nil.
    func shownModel(at path: DocumentPath) -> T? {
        state.withLock { state in
            if state.queryView?.shows(path) == false { return nil }
            let index = Self.binarySearch(state.orderedPaths, path)
            return index < state.orderedPaths.count && state.orderedPaths[index] == path ? state.ordered[index] : nil
        }
    }

    func model(at path: DocumentPath) -> T? {
        state.withLock { state in
            let index = Self.binarySearch(state.orderedPaths, path)
            return index < state.orderedPaths.count && state.orderedPaths[index] == path ? state.ordered[index] : nil
        }
    }

    /// The shown models whose path passes a predicate.
    func shownModels(where predicate: (DocumentPath) -> Bool) -> [T] {
        shownDocuments.filter { predicate($0.path) }.map(\.model)
    }

    func metadata(at path: DocumentPath) -> DocumentMetadata {
        state.withLock { DocumentMetadata(hasPendingWrites: $0.view.hasPendingWrites(path), isFromCache: $0.isFromCache) }
    }

    var pendingWriteCount: Int { state.withLock { $0.view.outbox.count } }
    var pendingWrites: [PendingWrite] { state.withLock { Array($0.view.outbox.entries) } }
    var rejectedWrites: [RejectedWrite] { state.withLock { $0.rejected } }
    var isFromCache: Bool { state.withLock { $0.isFromCache } }

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

    /// Runs a write to the engine's persistence, outside the state's lock (inside `serial`). A
    /// failure is logged as `persist_fail`: the in-memory state goes on, and it is never dropped
    /// silently. Returns whether it was written.
    @discardableResult
    func store(_ write: LocalWrite) -> Bool {
        do {
            try write.run()
            return true
        } catch {
            logPersistFailure(error)
            return false
        }
    }

    func notifyChanged(_ changes: EngineChanges) {
        let observers = state.withLock { Array($0.observers.values) }
        didChange(changes)
        observers.forEach { $0() }
    }
}

extension SyncCore {
    /// Drops the cached documents (memory and disk); pending writes stay in the view and the outbox.
    func clearDocuments(forgetDocumentID: Bool = false) {
        serial.withLock { _ in
            let (write, undecided) = state.withLock { state -> (LocalWrite, [Document]) in
                if forgetDocumentID { state.documentID = nil }
                state.view.clearBase(now: Date())
                state.listener.forgetResumeVersion()
                state.isFromCache = true
                var change = LocalCollectionChange()
                change.replacesAllDocuments = true
                let write = persistence.write(change, view: state.view, documentID: state.documentID, resumeVersion: nil)
                return (write, Self.pruneModels(in: &state))
            }
            store(write)
            installModels(undecided)
        }
        notifyChanged([.documents, .isFromCache])
    }

    /// After the base was dropped, in a locked step: the models of documents that went go too.
    /// Returns what pending writes still show, to decode again.
    static func pruneModels(in state: inout State) -> [Document] {
        let documents = state.view.documents
        var paths: [DocumentPath] = []
        var models: [T] = []
        for (path, model) in zip(state.orderedPaths, state.ordered) where documents[path] != nil {
            paths.append(path)
            models.append(model)
        }
        state.orderedPaths = paths
        state.ordered = models
        refreshQueryView(nil, in: &state)
        return Array(documents.values)
    }

    var documentID: String? { state.withLock { $0.documentID } }

    /// Points a document engine at another document: the old cached document goes, its pending
    /// writes stay. Returns whether the id changed.
    func switchDocument(to id: String) -> Bool {
        let switched = serial.withLock { _ -> Bool in
            let change = state.withLock { state -> (LocalWrite, [Document])? in
                guard state.documentID != id else { return nil }
                state.documentID = id
                state.view.clearBase(now: Date())
                state.listener.forgetResumeVersion()
                state.isFromCache = true
                let write = persistence.write(LocalCollectionChange(), view: state.view, documentID: id, resumeVersion: nil)
                return (write, Self.pruneModels(in: &state))
            }
            guard let (write, undecided) = change else { return false }
            store(write)
            installModels(undecided)
            return true
        }
        if switched { notifyChanged([.documents, .isFromCache]) }
        return switched
    }
}

extension SyncCore {
    /// When the remote reports reconnections, a reconnection wakes the listener and the sender.
    func bindReachability(of remote: any ReachabilityReporting) {
        remote.whenReachable { [weak self] in self?.retryNowIfDown() }
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
