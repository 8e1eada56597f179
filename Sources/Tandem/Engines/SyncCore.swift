import Foundation
import Synchronization
import TandemCore

/// The machinery the three engines share: the local view and its decoded models, the outbox and
/// its single in-order sender, the listener with retry, persistence and analytics events.
///
/// State lives in one mutex. Persistence writes happen under it on purpose: the durable order of
/// outbox entries must be the in-memory order, and they are short local writes with no suspension.
package final class SyncCore<T: SyncModel>: Sendable {
    enum WriteOutcome: Sendable {
        case acknowledged(WriteAcknowledgement)
        case rejected(TandemError)
        /// Not confirmed yet (offline or a transient failure): kept in the outbox and retried.
        case queued
        /// Not accepted: the local store could not record it, so nothing was queued.
        case notStored(any Error)
    }

    struct State {
        var view: LocalView
        /// The decoded models in path order, and their paths: a lookup is a binary search, which
        /// spares keeping a dictionary of generic models in step (the costliest part of a snapshot).
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var resumeVersion: Version?
        var documentID: String?
        /// The query a collection engine's listener follows.
        var query: Query?
        var isFromCache = true
        var rejected: [RejectedWrite] = []
        // The sender.
        var flushing = false
        var flushFailures = 0
        var flushRetry: Task<Void, Never>?
        /// A reconnection arrived while a send was under way: if that send fails, retry at once.
        var flushAfterFailure = false
        var waiters: [MutationID: [CheckedContinuation<WriteOutcome, Never>]] = [:]
        // The listener.
        var listener: Task<Void, Never>?
        var listenerGeneration = 0
        var listenerFailures = 0
        var listenerDown = false
        var wake: CheckedContinuation<Void, Never>?
        var observers: [Int: @Sendable () -> Void] = [:]
        var nextObserver = 0
        /// Persistence writes that failed under the lock, for ``reportPersistFailures()`` to log.
        var persistFailures: [String] = []
    }

    let managerKey: String
    let logger: (any DataSyncLogger)?
    let clock: any Clock<Duration>
    let retryPolicy: RetryPolicy
    let randomness: RetryRandomness
    let persistence: EnginePersistence
    let commit: @Sendable ([Mutation]) async throws -> [WriteAcknowledgement]
    let state: Mutex<State>
    /// Called, outside the lock, after the view changed.
    let didChange: @Sendable () -> Void

    init(
        managerKey: String, logger: (any DataSyncLogger)?, clock: any Clock<Duration>, retryPolicy: RetryPolicy,
        random: any RandomNumberGenerator & Sendable, persistence: EnginePersistence, base: [Document], outbox: Outbox, documentID: String?, resumeVersion: Version?,
        commit: @escaping @Sendable ([Mutation]) async throws -> [WriteAcknowledgement],
        didChange: @escaping @Sendable () -> Void
    ) {
        self.managerKey = managerKey
        self.logger = logger
        self.clock = clock
        self.retryPolicy = retryPolicy
        self.randomness = RetryRandomness(random)
        self.persistence = persistence
        self.commit = commit
        self.didChange = didChange
        var initial = State(view: LocalView(base: base, outbox: outbox, now: Date()))
        initial.resumeVersion = resumeVersion
        initial.documentID = documentID
        Self.rebuildModels(&initial, orderHint: base.map(\.path))
        state = Mutex(initial)
    }

    /// The retry policy's delay after `failures` failures in a row, with its jitter.
    func retryDelay(afterFailures failures: Int) -> Duration? {
        randomness.delay(retryPolicy, afterFailures: failures)
    }

    // MARK: Events

    func log(_ event: String, _ parameters: [String: any Sendable] = [:], severity: DataSyncLogEvent.Severity = .info) {
        logger?.trackEvent(DataSyncLogEvent(name: "\(managerKey)_\(event)", parameters: parameters, severity: severity))
    }

    // MARK: Models

    /// Decodes a view document into a model; the document id fills a missing `id` field.
    static func decode(_ document: Document) -> T? {
        try? JSONValueDecoder().decode(T.self, from: document.data, defaultID: document.path.id)
    }

    /// Decodes every view document. `orderHint` lists paths in the order they probably sort in (the
    /// persistence's order); checking that order costs one pass, where sorting would cost n log n.
    static func rebuildModels(_ state: inout State, orderHint: [DocumentPath] = []) {
        var paths = orderHint.filter { state.view.documents[$0] != nil }
        if paths.count != state.view.documents.count {
            paths = Array(state.view.documents.keys)
        }
        if !zip(paths, paths.dropFirst()).allSatisfy({ $0 < $1 }) {
            paths.sort()
        }
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        orderedPaths.reserveCapacity(paths.count)
        ordered.reserveCapacity(paths.count)
        for path in paths {
            guard let model = state.view.documents[path].flatMap(decode) else { continue }
            orderedPaths.append(path)
            ordered.append(model)
        }
        state.orderedPaths = orderedPaths
        state.ordered = ordered
    }

    /// Brings the decoded models of some paths in line with the view.
    static func refreshModels(_ paths: [DocumentPath], in state: inout State, prepared: PreparedModels? = nil) {
        // Many paths at once (a snapshot, a large batch): one merge pass instead of an insertion
        // each, which would be quadratic.
        if paths.count > 64 {
            mergeModels(paths, in: &state, prepared: prepared)
            return
        }
        for path in paths {
            let model = state.view.documents[path].flatMap(decode)
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

    /// Re-decodes `paths` and merges them into the ordered models in one pass.
    static func mergeModels(_ paths: [DocumentPath], in state: inout State, prepared: PreparedModels? = nil) {
        merge(decodeModels(paths, from: state.view, prepared: prepared), into: &state)
    }

    /// Models decoded from a batch's documents while its later pieces were still arriving, in the
    /// batch's order. Each stands for the view's document as long as the view shows that very
    /// version of it with no pending write on top (a server version of a document never changes).
    struct PreparedModels {
        /// Every change's path and document version.
        var paths: [DocumentPath] = []
        var versions: [Version?] = []
        /// Whether each change's document decoded; those that did, with their paths.
        var decodes: [Bool] = []
        var modelPaths: [DocumentPath] = []
        var models: [T] = []
        /// Whether `modelPaths` is strictly increasing (checked as they come, while at hand).
        private(set) var inPathOrder = true

        mutating func add(_ changes: [RemoteChange]) {
            for change in changes {
                paths.append(change.path)
                versions.append(change.document?.version)
                let model = change.document.flatMap(decode)
                decodes.append(model != nil)
                if let model {
                    if inPathOrder, let last = modelPaths.last, !(last < change.path) { inPathOrder = false }
                    modelPaths.append(change.path)
                    models.append(model)
                }
            }
        }
    }

    /// Models decoded for a merge: the changed paths, and those that still decode, in path order.
    struct DecodedModels {
        var changed: [DocumentPath] = []
        var paths: [DocumentPath] = []
        var models: [T] = []
    }

    /// Decodes the view's documents at `paths`, taking each prepared model that still stands for
    /// its document.
    static func decodeModels(_ paths: [DocumentPath], from view: LocalView, prepared: PreparedModels? = nil) -> DecodedModels {
        // Sort the paths, not (path, model) pairs (moving generic models is slow), and only when
        // they do not come sorted already (strictly increasing also means no repeats).
        var decoded = DecodedModels()
        decoded.changed = paths
        if !zip(paths, paths.dropFirst()).allSatisfy({ $0 < $1 }) {
            decoded.changed = Set(paths).sorted()
        }
        // Prepared models line up with the batch; they serve when the paths are the batch's own.
        let prepared = prepared.flatMap { $0.paths.count == decoded.changed.count ? $0 : nil }
        let documents = view.documents
        let anyPending = view.hasPendingWrites
        // Two arrays rather than one of (path, model) pairs: generic tuples copy slowly.
        decoded.paths.reserveCapacity(decoded.changed.count)
        decoded.models.reserveCapacity(decoded.changed.count)
        var preparedModel = 0
        for (index, path) in decoded.changed.enumerated() {
            // The prepared model of this change, if it decoded.
            var candidate: T?
            if let prepared, prepared.decodes[index] {
                candidate = prepared.models[preparedModel]
                preparedModel += 1
            }
            guard let document = documents[path] else { continue }
            let model: T?
            if let prepared, prepared.paths[index] == path, prepared.versions[index] == document.version,
               !anyPending || !view.hasPendingWrites(path) {
                model = candidate
            } else {
                model = decode(document)
            }
            if let model {
                decoded.paths.append(path)
                decoded.models.append(model)
            }
        }
        return decoded
    }

    /// Puts decoded models in place of those of their paths, keeping path order.
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

    var ordered: [T] { state.withLock { $0.ordered } }

    func model(at path: DocumentPath) -> T? {
        state.withLock { state in
            let index = Self.binarySearch(state.orderedPaths, path)
            return index < state.orderedPaths.count && state.orderedPaths[index] == path ? state.ordered[index] : nil
        }
    }

    func models(where predicate: (DocumentPath) -> Bool) -> [T] {
        state.withLock { state in
            zip(state.orderedPaths, state.ordered).filter { predicate($0.0) }.map(\.1)
        }
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

    /// Writes `change` to the engine's persistence, under the state's lock. A failure is kept for
    /// ``reportPersistFailures()`` to log once the lock is released (the logger is the app's code):
    /// the in-memory state goes on, and the failure is never dropped silently.
    func persist(_ change: LocalCollectionChange, in state: inout State, documentID: String?, resumeVersion: Version?) {
        do {
            try persistence.persist(change, view: state.view, documentID: documentID, resumeVersion: resumeVersion)
        } catch {
            state.persistFailures.append("\(error)")
        }
    }

    /// Logs every persistence failure kept since the last call, as a severe `persist_fail` event.
    func reportPersistFailures() {
        let failures = state.withLock { state -> [String] in
            defer { state.persistFailures.removeAll() }
            return state.persistFailures
        }
        for failure in failures {
            log("persist_fail", ["error_description": failure], severity: .severe)
        }
    }

    func notifyChanged() {
        let observers = state.withLock { Array($0.observers.values) }
        didChange()
        observers.forEach { $0() }
    }
}

extension SyncCore {
    /// Drops the cached documents (memory and disk); pending writes stay in the view and the outbox.
    func clearDocuments(forgetDocumentID: Bool = false) {
        state.withLock { state in
            if forgetDocumentID { state.documentID = nil }
            state.view.clearBase(now: Date())
            state.resumeVersion = nil
            state.isFromCache = true
            var change = LocalCollectionChange()
            change.replacesAllDocuments = true
            persist(change, in: &state, documentID: state.documentID, resumeVersion: nil)
            Self.rebuildModels(&state)
        }
        reportPersistFailures()
        notifyChanged()
    }



    var documentID: String? { state.withLock { $0.documentID } }

    /// Points a document engine at another document: the old cached document goes, its pending
    /// writes stay. Returns whether the id changed.
    func switchDocument(to id: String) -> Bool {
        let switched = state.withLock { state -> Bool in
            guard state.documentID != id else { return false }
            state.documentID = id
            state.view.clearBase(now: Date())
            state.resumeVersion = nil
            state.isFromCache = true
            persist(LocalCollectionChange(), in: &state, documentID: id, resumeVersion: nil)
            Self.rebuildModels(&state)
            return true
        }
        reportPersistFailures()
        if switched { notifyChanged() }
        return switched
    }
}

extension SyncCore {
    /// When the remote reports reconnections, a reconnection wakes the listener and the sender.
    func bindReachability(of remote: Any) {
        guard let reporting = remote as? any ReachabilityReporting else { return }
        reporting.whenReachable { [weak self] in self?.retryNowIfDown() }
    }
}
