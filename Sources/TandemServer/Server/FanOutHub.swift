import Logging
import ServiceLifecycle
import Synchronization
import TandemCore

/// Matches each commit against the live listeners and sends every listener only what affects it.
///
/// Listeners are indexed by document path, collection path and collection-group name, so a commit
/// looks up its candidates instead of scanning every listener. A listener is registered before its
/// snapshot is read; commits that arrive while it loads are buffered and replayed after the snapshot
/// (those the snapshot already holds are dropped), so none is missed and none is sent twice.
///
/// The hub is a `Service` of its own, off the commit path: a store's observer only queues each
/// ``CommitNotice`` (``receive(_:)``), and `run()` puts the batches in version order up to the
/// store's watermark (``CommitOrder``) and delivers them, so the writer goes back to committing at
/// once. Limit listeners re-read their query in child tasks of `run()`.
final class FanOutHub: Service, Sendable {
    struct State {
        var listeners: [ListenerKey: ListenerState] = [:]
        var byDocument: [DocumentPath: Set<ListenerKey>] = [:]
        var byCollection: [CollectionPath: Set<ListenerKey>] = [:]
        var byGroup: [String: Set<ListenerKey>] = [:]
    }

    let state = Mutex(State())
    let store: any ServerStore
    /// Changes per frame, so a large snapshot or catch-up is sent as several frames of one batch.
    let framing: Int
    let logger: Logger
    private let notices: AsyncStream<CommitNotice>
    private let noticeQueue: AsyncStream<CommitNotice>.Continuation
    private let requeries: AsyncStream<ListenerKey>
    private let requeryQueue: AsyncStream<ListenerKey>.Continuation
    /// Touched only by `run()`'s one notice loop.
    private let order = Mutex(CommitOrder())

    init(store: any ServerStore, framing: Int = 500, logger: Logger = Logger(label: "tandem.fanout")) {
        self.store = store
        self.framing = framing
        self.logger = logger
        (notices, noticeQueue) = AsyncStream.makeStream(of: CommitNotice.self)
        (requeries, requeryQueue) = AsyncStream.makeStream(of: ListenerKey.self)
    }

    /// Queues a store's notice for `run()`; returns at once, as a store observer must.
    func receive(_ notice: CommitNotice) {
        noticeQueue.yield(notice)
    }

    /// Delivers the commits the store reports, in version order, and runs the re-reads of limit
    /// listeners, until the service group shuts down.
    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await notice in self.notices {
                        let (ready, late) = self.order.withLock { $0.receive(notice) }
                        if late > 0 {
                            self.logger.error("the store reported \(late) commit(s) at or below a watermark it had already passed; listeners may have missed them")
                        }
                        for batch in ready where !batch.changes.isEmpty { self.publish(batch) }
                    }
                }
                for await key in self.requeries {
                    group.addTask { await self.requery(key) }
                }
            }
        }
    }

    var listenerCount: Int { state.withLock { $0.listeners.count } }

    // MARK: Listening

    /// Starts a listener: registers it, loads its snapshot (or its changes since `resumeFrom`), sends
    /// that, then goes live. A failure is sent as an error frame answering the listen.
    func listen(_ key: ListenerKey, target: ListenTarget, resumeFrom: Version?, outbox: SessionOutbox) async {
        let listener: ListenerState
        do {
            listener = try ListenerState(target: target, outbox: outbox)
        } catch {
            outbox.send(.error(id: key.target, error))
            return
        }
        state.withLock { state in
            state.listeners[key] = listener
            switch target {
            case .document(let path): state.byDocument[path, default: []].insert(key)
            case .collection(let path, _): state.byCollection[path, default: []].insert(key)
            case .collectionGroup(let group, _): state.byGroup[group, default: []].insert(key)
            }
        }
        // A session that closed while this listen was starting has already removed its listeners.
        if outbox.isClosed {
            unlisten(key)
            return
        }
        do {
            let load = try await initialLoad(key, target: target, resumeFrom: resumeFrom, hasLimit: listener.hasLimit)
            activate(key, load)
        } catch {
            unlisten(key)
            outbox.send(.error(id: key.target, error as? TandemError ?? TandemError(.unavailable, "The listener could not load: \(error).")))
        }
    }

    /// Stops one listener.
    func unlisten(_ key: ListenerKey) {
        state.withLock { state in
            guard let listener = state.listeners.removeValue(forKey: key) else { return }
            switch listener.target {
            case .document(let path): state.byDocument.remove(key, at: path)
            case .collection(let path, _): state.byCollection.remove(key, at: path)
            case .collectionGroup(let group, _): state.byGroup.remove(key, at: group)
            }
        }
    }

    /// Stops every listener of a session.
    func removeSession(_ session: Int) {
        let keys = state.withLock { $0.listeners.keys.filter { $0.session == session } }
        keys.forEach(unlisten)
    }

    struct Load {
        var changes: [RemoteChange]
        var isSnapshot: Bool
        var reset: Bool
        var version: Version
        /// The paths in the result and their versions; nil when unknown (after a resume, or for a
        /// listener without filters, which needs none: every document in its scope belongs).
        var members: [DocumentPath: Version]?
        /// The snapshot's frames went out as the store wrote them: `changes` is empty and there is
        /// nothing left to send.
        var sent = false
    }

    private func initialLoad(_ key: ListenerKey, target: ListenTarget, resumeFrom: Version?, hasLimit: Bool) async throws -> Load {
        if let resumeFrom, !hasLimit {
            do {
                var changes: [RemoteChange] = []
                var since = resumeFrom
                while true {
                    let page = try await store.changes(since: since, in: target, limit: 1000)
                    changes += page.changes
                    since = page.version
                    if !page.hasMore { break }
                }
                return Load(changes: changes, isSnapshot: false, reset: false, version: since, members: nil)
            } catch TandemError.Code.outOfRange {
                return try await snapshot(key, target, reset: true)
            }
        }
        return try await snapshot(key, target, reset: false)
    }

    private func snapshot(_ key: ListenerKey, _ target: ListenTarget, reset: Bool) async throws -> Load {
        if let query = target.query, query.operations.isEmpty,
           let version = try await store.encodedSnapshot(target, groupSize: framing, frames: { [self] frame in
               sendSnapshotFrame(frame, to: key, reset: reset)
           }) {
            // No member table: every document in the listener's scope belongs to it.
            return Load(changes: [], isSnapshot: true, reset: reset, version: version, members: nil, sent: true)
        }
        let snapshot = try await store.read(target)
        var members: [DocumentPath: Version] = [:]
        for document in snapshot.documents { members[document.path] = document.version }
        return Load(changes: snapshot.documents.map(RemoteChange.upsert), isSnapshot: true, reset: reset, version: snapshot.version, members: members)
    }

    /// Sends a frame of a snapshot the store is still writing. Commits meanwhile wait in the
    /// listener's buffer, so they follow the last frame. False stops the read: the listener is
    /// gone, or its connection could not take the frame.
    private func sendSnapshotFrame(_ frame: EncodedSnapshotFrame, to key: ListenerKey, reset: Bool) -> Bool {
        let outbox = state.withLock { state -> SessionOutbox? in
            guard let listener = state.listeners[key], case .loading = listener.phase else { return nil }
            return listener.outbox
        }
        guard let outbox else { return false }
        return outbox.send(text: WireWriter.batch(target: key.target, changes: frame.changes, version: frame.version,
                                                  isSnapshot: true, reset: reset, more: !frame.isLast))
    }

    /// Sends a listener its loaded batch and the commits buffered meanwhile, and makes it live.
    private func activate(_ key: ListenerKey, _ load: Load) {
        var requery = false
        state.withLock { state in
            guard var listener = state.listeners[key], case .loading(let buffered) = listener.phase else { return }
            if !load.sent {
                send(load.changes, to: key, listener: listener, version: load.version, isSnapshot: load.isSnapshot, reset: load.reset)
            }
            listener.members = load.members
            listener.phase = .live(load.version)
            for batch in buffered where batch.version > load.version {
                if listener.hasLimit {
                    requery = true
                    listener.phase = .loading([])
                    break
                }
                let codes = listener.deliver(Array(batch.changes.indices), of: batch.changes)
                if !codes.isEmpty {
                    send(ListenerState.changes(codes, of: batch.changes), to: key, listener: listener, version: batch.version, isSnapshot: false, reset: false)
                }
            }
            state.listeners[key] = listener
        }
        if requery { startRequery(key) }
    }

    // MARK: Commits

    /// Delivers one visible commit; called in version order.
    func publish(_ batch: CommittedBatch) {
        var requeries: [ListenerKey] = []
        state.withLock { state in
            var affected: [ListenerKey: [Int]] = [:]
            for (index, change) in batch.changes.enumerated() {
                for key in state.byDocument[change.path] ?? [] { affected[key, default: []].append(index) }
                for key in state.byCollection[change.path.parent] ?? [] { affected[key, default: []].append(index) }
                for key in state.byGroup[change.path.collectionGroup] ?? [] { affected[key, default: []].append(index) }
            }
            // Listeners that get the same changes share one encoding of them, and those of one
            // connection share one message naming them all.
            var encoded: [[Int]: [UInt8]] = [:]
            var shared: [SharedDelivery: [Int]] = [:]
            var outboxes: [Int: SessionOutbox] = [:]
            for (key, indices) in affected {
                guard var listener = state.listeners[key] else { continue }
                switch listener.phase {
                case .loading(var buffered):
                    buffered.append(CommittedBatch(version: batch.version, changes: indices.map { batch.changes[$0] }))
                    listener.phase = .loading(buffered)
                case .live(let through) where batch.version <= through:
                    // Its snapshot was read after this commit became visible and before it was
                    // published: it holds the commit already.
                    continue
                case .live:
                    if listener.hasLimit {
                        // A limit's result depends on documents outside it: read it again.
                        listener.phase = .loading([])
                        requeries.append(key)
                    } else {
                        let codes = listener.deliver(indices, of: batch.changes)
                        listener.phase = .live(batch.version)
                        if !codes.isEmpty {
                            shared[SharedDelivery(session: key.session, codes: codes), default: []].append(key.target)
                            outboxes[key.session] = listener.outbox
                        }
                    }
                }
                state.listeners[key] = listener
            }
            for (delivery, targets) in shared {
                guard let outbox = outboxes[delivery.session] else { continue }
                let changes: [UInt8]
                if let cached = encoded[delivery.codes] {
                    changes = cached
                } else {
                    changes = WireWriter.changes(ListenerState.changes(delivery.codes, of: batch.changes))
                    encoded[delivery.codes] = changes
                }
                if targets.count == 1 {
                    outbox.send(text: WireWriter.batch(target: targets[0], changes: changes, version: batch.version, isSnapshot: false, reset: false, more: false))
                } else {
                    outbox.send(text: WireWriter.sharedBatch(targets: targets.sorted(), changes: changes, version: batch.version))
                }
            }
        }
        requeries.forEach(startRequery)
    }

    /// The listeners of one connection that get the same changes from a commit.
    struct SharedDelivery: Hashable {
        var session: Int
        var codes: [Int]
    }

    /// Asks `run()` to read a limit listener's query again.
    private func startRequery(_ key: ListenerKey) {
        requeryQueue.yield(key)
    }

    /// Reads a limit query again and sends the difference from what the listener has.
    private func requery(_ key: ListenerKey) async {
        guard let target = state.withLock({ $0.listeners[key]?.target }) else { return }
        do {
            let snapshot = try await store.read(target)
            var again = false
            state.withLock { state in
                guard var listener = state.listeners[key], case .loading(let buffered) = listener.phase else { return }
                let previous = listener.members ?? [:]
                var members: [DocumentPath: Version] = [:]
                var changes: [RemoteChange] = []
                for document in snapshot.documents {
                    members[document.path] = document.version
                    if previous[document.path] != document.version { changes.append(.upsert(document)) }
                }
                for path in previous.keys where members[path] == nil {
                    changes.append(.removal(path, version: snapshot.version))
                }
                listener.members = members
                listener.phase = .live(snapshot.version)
                if !changes.isEmpty { send(changes, to: key, listener: listener, version: snapshot.version, isSnapshot: false, reset: false) }
                if buffered.contains(where: { $0.version > snapshot.version }) {
                    listener.phase = .loading([])
                    again = true
                }
                state.listeners[key] = listener
            }
            if again { startRequery(key) }
        } catch {
            let outbox = state.withLock { $0.listeners[key]?.outbox }
            unlisten(key)
            outbox?.send(.error(id: key.target, error as? TandemError ?? TandemError(.unavailable, "The listener could not reload: \(error).")))
        }
    }

    /// Sends one batch, in frames of at most `framing` changes.
    private func send(_ changes: [RemoteChange], to key: ListenerKey, listener: ListenerState, version: Version, isSnapshot: Bool, reset: Bool) {
        var start = 0
        repeat {
            let end = min(start + framing, changes.count)
            let text = WireWriter.batch(target: key.target, changes: WireWriter.changes(changes[start..<end]), version: version,
                                        isSnapshot: isSnapshot, reset: reset, more: end < changes.count)
            if !listener.outbox.send(text: text) { return }
            start = end
        } while start < changes.count
    }
}

extension Dictionary where Value == Set<ListenerKey> {
    mutating func remove(_ key: ListenerKey, at index: Key) {
        self[index]?.remove(key)
        if self[index]?.isEmpty == true { self[index] = nil }
    }
}
