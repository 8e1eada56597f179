import Foundation
import Synchronization
import Tandem
import TandemCore

/// An in-memory stand-in for a Tandem server, shared by the mock remote services: documents with
/// versions, exactly-once writes by `MutationID`, listeners with snapshots, incremental batches and
/// resume, and fault injection (failures, offline, lost acknowledgements, latency).
///
/// ```swift
/// let store = InMemoryDocumentStore()
/// store.failNextCalls(2)              // the next two calls throw `unavailable`
/// store.dropNextAcknowledgements(1)   // the next commit applies, then its answer is lost
/// store.goOffline()                   // listeners end with `unavailable` until goOnline()
/// ```
public final class InMemoryDocumentStore: Sendable {
    struct Listener {
        let target: Target
        let query: CompiledQuery
        let continuation: AsyncThrowingStream<RemoteChangeBatch, any Error>.Continuation
    }

    enum Target {
        case collection(CollectionPath)
        case group(String)
        case document(DocumentPath)

        func covers(_ path: DocumentPath) -> Bool {
            switch self {
            case .collection(let collection): return collection.contains(path)
            case .group(let name): return path.collectionGroup == name
            case .document(let document): return document == path
            }
        }
    }

    struct State {
        var documents: [DocumentPath: Document] = [:]
        var version = Version.zero
        /// Every commit's changes, for resuming listeners.
        var log: [RemoteChange] = []
        var applied: [MutationID: WriteAcknowledgement] = [:]
        var listeners: [Int: Listener] = [:]
        var nextListener = 0
        var failuresLeft = 0
        var failure = TandemError(.unavailable, "The mock server failed this call on purpose.")
        var offline = false
        var acknowledgementsToDrop = 0
        var commitCount = 0
        var appliedCount = 0
    }

    private let state = Mutex(State())
    private let clock: any Clock<Duration>
    private let latency: Mutex<Duration>

    /// - Parameters:
    ///   - documents: the documents the store starts with, at version 1.
    ///   - clock: the clock latency is waited on.
    public init(documents: [Document] = [], clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
        self.latency = Mutex(.zero)
        state.withLock { state in
            guard !documents.isEmpty else { return }
            state.version = 1
            for var document in documents {
                document.version = 1
                state.documents[document.path] = document
            }
        }
    }

    // MARK: Fault injection

    /// The next `count` calls (reads, listens, commits) throw `error`.
    public func failNextCalls(_ count: Int, with error: TandemError = TandemError(.unavailable, "The mock server failed this call on purpose.")) {
        state.withLock {
            $0.failuresLeft = count
            $0.failure = error
        }
    }

    /// Every call throws `unavailable`, and live listeners end with it, until ``goOnline()``.
    public func goOffline() {
        let listeners = state.withLock { state -> [Listener] in
            state.offline = true
            defer { state.listeners.removeAll() }
            return Array(state.listeners.values)
        }
        for listener in listeners {
            listener.continuation.finish(throwing: TandemError(.unavailable, "The mock server is offline."))
        }
    }

    public func goOnline() {
        state.withLock { $0.offline = false }
    }

    /// The next `count` commits are applied, but their acknowledgement is lost: the caller gets
    /// `unavailable`, as when a connection drops after the commit.
    public func dropNextAcknowledgements(_ count: Int) {
        state.withLock { $0.acknowledgementsToDrop = count }
    }

    /// A delay before every answer, waited on the store's clock.
    public func setLatency(_ duration: Duration) {
        latency.withLock { $0 = duration }
    }

    // MARK: Inspection

    /// The stored documents, by path.
    public var documents: [DocumentPath: Document] { state.withLock { $0.documents } }
    /// The current version.
    public var version: Version { state.withLock { $0.version } }
    /// How many commit calls arrived, and how many writes were applied (replays excluded).
    public var commitCount: Int { state.withLock { $0.commitCount } }
    public var appliedWriteCount: Int { state.withLock { $0.appliedCount } }
    /// How many listeners are live.
    public var listenerCount: Int { state.withLock { $0.listeners.count } }

    // MARK: Server behaviour

    /// The listeners being set up (their first batch not yet sent), by number.
    private let setups = Mutex<(next: Int, running: [Int: Task<Void, Never>])>((0, [:]))

    /// Returns once every listener asked for so far is set up or gone: what a test awaits before
    /// counting listeners.
    public func settle() async {
        let running = setups.withLock { Array($0.running.values) }
        for task in running { await task.value }
    }

    func enter() async throws {
        let delay = latency.withLock { $0 }
        if delay > .zero { try await clock.sleep(for: delay) }
        try state.withLock { state in
            if state.offline { throw TandemError(.unavailable, "The mock server is offline.") }
            if state.failuresLeft > 0 {
                state.failuresLeft -= 1
                throw state.failure
            }
        }
    }

    func get(_ path: DocumentPath) async throws -> Document? {
        try await enter()
        return state.withLock { $0.documents[path] }
    }

    func query(_ target: Target, _ query: Query) async throws -> [Document] {
        try await enter()
        let compiled = try CompiledQuery(query)
        let documents = state.withLock { $0.documents.values.filter { target.covers($0.path) } }
        return compiled.evaluate(documents)
    }

    /// Applies writes atomically and exactly once, then tells the listeners.
    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] {
        try await enter()
        let (acknowledgements, notifications, dropped) = try state.withLock { state -> ([WriteAcknowledgement], [(Listener, RemoteChangeBatch)], Bool) in
            state.commitCount += 1
            var working = state.documents
            var version = state.version
            var acknowledgements: [WriteAcknowledgement] = []
            var changes: [RemoteChange] = []
            var before: [DocumentPath: Document?] = [:]
            for mutation in mutations {
                if let id = mutation.id, let original = state.applied[id] {
                    acknowledgements.append(original.replayed)
                    continue
                }
                version = version.next
                let previous = working[mutation.path]
                if before[mutation.path] == nil { before[mutation.path] = .some(previous) }
                let result = try mutation.apply(to: previous, version: version, serverTime: ServerTime(Date()))
                working[mutation.path] = result
                changes.append(RemoteChange(path: mutation.path, document: result, version: version, mutationID: mutation.id))
                acknowledgements.append(WriteAcknowledgement(id: mutation.id, version: version, document: result))
            }
            // All writes held: commit them together.
            state.documents = working
            state.version = version
            state.log += changes
            state.appliedCount += changes.count
            for acknowledgement in acknowledgements {
                if let id = acknowledgement.id { state.applied[id] = acknowledgement }
            }
            let notifications = Self.notifications(for: changes, before: before, listeners: state.listeners.values, version: version)
            var dropped = false
            if state.acknowledgementsToDrop > 0 {
                state.acknowledgementsToDrop -= 1
                dropped = true
            }
            return (acknowledgements, notifications, dropped)
        }
        for (listener, batch) in notifications { listener.continuation.yield(batch) }
        if dropped { throw TandemError(.unavailable, "The connection dropped before the acknowledgement arrived.") }
        return acknowledgements
    }

    /// Changes a document as another client would (no mutation id), and tells the listeners.
    public func simulateWrite(_ document: Document) {
        _ = try? commitDirect(.set(document.path, document.data))
    }

    /// Deletes a document as another client would.
    public func simulateDelete(_ path: DocumentPath) {
        _ = try? commitDirect(.delete(path))
    }

    private func commitDirect(_ mutation: Mutation) throws -> [WriteAcknowledgement] {
        let (acknowledgement, notifications) = try state.withLock { state -> (WriteAcknowledgement, [(Listener, RemoteChangeBatch)]) in
            let version = state.version.next
            let previous = state.documents[mutation.path]
            let result = try mutation.apply(to: previous, version: version, serverTime: ServerTime(Date()))
            state.documents[mutation.path] = result
            state.version = version
            let change = RemoteChange(path: mutation.path, document: result, version: version)
            state.log.append(change)
            let notifications = Self.notifications(for: [change], before: [mutation.path: previous], listeners: state.listeners.values, version: version)
            return (WriteAcknowledgement(id: MutationID(clientID: "server", sequence: version.rawValue), version: version, document: result), notifications)
        }
        for (listener, batch) in notifications { listener.continuation.yield(batch) }
        return [acknowledgement]
    }

    private static func notifications(
        for changes: [RemoteChange], before: [DocumentPath: Document?], listeners: some Sequence<Listener>, version: Version
    ) -> [(Listener, RemoteChangeBatch)] {
        var result: [(Listener, RemoteChangeBatch)] = []
        for listener in listeners {
            var relevant: [RemoteChange] = []
            for change in changes where listener.target.covers(change.path) {
                let matchesNow = change.document.map { listener.query.matchesFilters($0.data) } ?? false
                let matchedBefore = (before[change.path] ?? nil).map { listener.query.matchesFilters($0.data) } ?? false
                if matchesNow {
                    relevant.append(change)  // with its mutation id, so the writer knows its echo
                } else if matchedBefore {
                    relevant.append(.removal(change.path, version: change.version))
                }
            }
            if !relevant.isEmpty {
                result.append((listener, RemoteChangeBatch(isSnapshot: false, changes: relevant, version: version)))
            }
        }
        return result
    }

    func listen(_ target: Target, query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        let (stream, continuation) = AsyncThrowingStream<RemoteChangeBatch, any Error>.makeStream()
        let compiled: CompiledQuery
        do {
            compiled = try CompiledQuery(query)
        } catch {
            continuation.finish(throwing: error)
            return stream
        }
        // One termination handler for the whole life of the stream: one installed after the first
        // batch could come too late, and the listener stayed registered for good.
        let registration = ListenRegistration()
        // Created under the lock of the set-ups, so it is listed before its own removal can run.
        let task = setups.withLock { setups -> Task<Void, Never> in
            setups.next += 1
            let setup = setups.next
            let task = Task { await self.setUp(setup, target, compiled, resumeFrom, continuation, registration) }
            setups.running[setup] = task
            return task
        }
        continuation.onTermination = { [weak self] _ in
            task.cancel()
            let id = registration.state.withLock { registration -> Int? in
                registration.ended = true
                return registration.id
            }
            if let id { _ = self?.state.withLock { $0.listeners.removeValue(forKey: id) } }
        }
        return stream
    }

    private func setUp(
        _ setup: Int, _ target: Target, _ compiled: CompiledQuery, _ resumeFrom: Version?,
        _ continuation: AsyncThrowingStream<RemoteChangeBatch, any Error>.Continuation, _ registration: ListenRegistration
    ) async {
        defer { _ = setups.withLock { $0.running.removeValue(forKey: setup) } }
        do {
            try await enter()
        } catch {
            continuation.finish(throwing: error)
            return
        }
        state.withLock { state in
            // Registered and recorded before the first batch is yielded: whoever receives it and
            // stops finds the id to remove.
            let open = registration.state.withLock { registration -> Bool in
                if registration.ended { return false }
                registration.id = state.nextListener
                return true
            }
            guard open else { return }
            let id = state.nextListener
            state.nextListener += 1
            let listener = Listener(target: target, query: compiled, continuation: continuation)
            state.listeners[id] = listener
            // The first batch, under the lock so no commit slips between it and the live ones.
            if let resumeFrom, resumeFrom <= state.version {
                let changes = state.log.filter { $0.version > resumeFrom && target.covers($0.path) }.map { change -> RemoteChange in
                    if let document = change.document, compiled.matchesFilters(document.data) { return change }
                    return .removal(change.path, version: change.version)
                }
                continuation.yield(RemoteChangeBatch(isSnapshot: false, changes: changes, version: state.version))
            } else {
                let documents = compiled.evaluate(state.documents.values.filter { target.covers($0.path) })
                continuation.yield(RemoteChangeBatch(isSnapshot: true, changes: documents.map(RemoteChange.upsert), version: state.version))
            }
        }
    }
}

/// Whether a listener's stream ended, and the id it is registered under: read by its set-up and by
/// its termination, whichever comes first.
private final class ListenRegistration: Sendable {
    let state = Mutex<(id: Int?, ended: Bool)>((nil, false))
}
