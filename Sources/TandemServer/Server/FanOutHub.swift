import Logging
import ServiceLifecycle
import Synchronization
import TandemCore

/// Matches each commit against the live listeners and sends every listener only what affects it.
///
/// Listeners are kept in a ``ListenerTable``: grouped by target and indexed by document path,
/// collection path and collection-group name, so a commit looks up its few candidate groups instead
/// of scanning every listener. A listener is registered before its
/// snapshot is read; commits that arrive while it loads are buffered and replayed after the snapshot
/// (those the snapshot already holds are dropped), so none is missed and none is sent twice.
///
/// The hub is a `Service` of its own, off the commit path: a store's observer only queues each
/// ``CommitNotice`` (``receive(_:)``), and `run()` puts the batches in version order up to the
/// store's watermark (``CommitOrder``) and delivers them, so the writer goes back to committing at
/// once. Under load it takes every notice waiting at once, while the store has commits under way it
/// waits for them too, and under sustained load it delivers once per pacing interval
/// (``DeliveryHold``, ``FanOutPacing``); each delivery sends each connection one frame for all the
/// whole commits a listener gets: the busier the server, the fewer frames per commit.
/// Limit listeners re-read their query in child tasks of `run()`.
final class FanOutHub: Service, Sendable {
    struct State {
        var table = ListenerTable()
        var registrations = 0
        /// Listeners that were loading when the store said it missed commits (``reloadAll()``),
        /// by registration: what they load may lack them too, so each loads again once live.
        var staleLoads: [ListenerKey: Int] = [:]
    }

    let state = Mutex(State())
    let store: any ServerStore
    /// Changes per frame, so a large snapshot or catch-up is sent as several frames of one batch.
    let framing: Int
    let logger: Logger
    /// Notices waiting for `run()` (none are kept once it has stopped), and the signal that some are.
    private let pending = Mutex(PendingNotices())
    private struct PendingNotices {
        var notices: [CommitNotice] = []
        /// When the first of `notices` came.
        var since: ContinuousClock.Instant?
        var stopped = false
    }
    /// Counts the fan-out's latency (``ServerMetrics``).
    let metrics: ServerMetrics?
    private let wake: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation
    private let requeries: AsyncStream<(ListenerKey, Int, reloadFrom: Version?)>
    let requeryQueue: AsyncStream<(ListenerKey, Int, reloadFrom: Version?)>.Continuation
    /// Touched only by `run()`'s one notice loop.
    private let order = Mutex(CommitOrder())

    /// The most notices in a row whose batches wait for the store's next one (``DeliveryHold``).
    let holding: Int
    /// Deliveries under sustained load, on `clock`; nil delivers as soon as the store allows.
    let pacing: FanOutPacing?
    let clock: ServerClock

    /// Told the number of listeners after each change of it.
    let onListenerCountChange: (@Sendable (Int) -> Void)?

    init(store: any ServerStore, framing: Int = 500, holding: Int = 4, pacing: FanOutPacing? = nil,
         clock: ServerClock = ServerClock(ContinuousClock()), logger: Logger = Logger(label: "tandem.fanout"), metrics: ServerMetrics? = nil,
         onListenerCountChange: (@Sendable (Int) -> Void)? = nil) {
        self.metrics = metrics
        self.onListenerCountChange = onListenerCountChange
        self.store = store
        self.framing = framing
        self.holding = holding
        self.pacing = pacing
        self.clock = clock
        self.logger = logger
        (wake, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (requeries, requeryQueue) = AsyncStream.makeStream(of: (ListenerKey, Int, reloadFrom: Version?).self)
    }

    /// Queues a store's notice for `run()`; returns at once, as a store observer must. Once `run()`
    /// has ended nothing reads the queue, so a notice is dropped instead of kept for good.
    func receive(_ notice: CommitNotice) {
        let queued = pending.withLock { pending -> Bool in
            guard !pending.stopped else { return false }
            if pending.notices.isEmpty { pending.since = .now }
            pending.notices.append(notice)
            return true
        }
        if queued { wakeContinuation.yield() }
    }

    /// Delivers the commits the store reports, in version order, and runs the re-reads of limit
    /// listeners, until the service group shuts down.
    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    var hold = DeliveryHold(limit: self.holding, pacing: self.pacing)
                    // When the oldest commit not yet delivered was told of, for the latency.
                    var waitingSince: ContinuousClock.Instant?
                    for await _ in self.wake {
                        var (released, since, incomplete) = self.release()
                        // Before the notice's own batches are delivered: they then wait in each
                        // listener's load, which starts from the version it had reached.
                        if incomplete { self.reloadAll() }
                        deciding: while true {
                            if !released.isEmpty, waitingSince == nil { waitingSince = since }
                            switch hold.receive(released, now: self.clock.now(), commitsUnderWay: { self.store.commitsUnderWay() }) {
                            case .deliver(let batches):
                                // Pacing bounds the frames each connection gets: a delivery
                                // that reached no listener sent none, and does not count.
                                if !self.publish(batches) { hold.reachedNoListener() }
                                if let start = waitingSince, !batches.isEmpty { self.metrics?.delivered(after: .now - start) }
                                waitingSince = nil
                                break deciding
                            case .wait:
                                break deciding
                            case .waitUntil(let deadline):
                                // Notices that come meanwhile wait in `pending` and go with these.
                                guard (try? await self.clock.sleepUntil(deadline)) != nil else { break deciding }  // shutting down
                                (released, since, incomplete) = self.release()
                                if incomplete { self.reloadAll() }
                            }
                        }
                    }
                }
                for await (key, registration, reloadFrom) in self.requeries {
                    if let reloadFrom {
                        group.addTask { await self.reload(key, registration: registration, from: reloadFrom) }
                    } else {
                        group.addTask { await self.requery(key, registration: registration) }
                    }
                }
            }
        }
        pending.withLock { pending in
            pending.stopped = true
            pending.notices.removeAll()
        }
    }

    /// The batches the notices queued since the last call release, in version order, without
    /// those that change nothing, and whether a notice said the store missed commits.
    private func release() -> ([CommittedBatch], since: ContinuousClock.Instant?, incomplete: Bool) {
        let (notices, since) = pending.withLock { pending in
            defer {
                pending.notices.removeAll(keepingCapacity: true)
                pending.since = nil
            }
            return (pending.notices, pending.since)
        }
        var ready: [CommittedBatch] = []
        var incomplete = false
        for notice in notices {
            incomplete = incomplete || notice.incomplete
            let (released, late) = order.withLock { $0.receive(notice) }
            if late > 0 {
                logger.error("the store reported \(late) commit(s) at or below a watermark it had already passed; listeners may have missed them")
            }
            ready += released.lazy.filter { !$0.changes.isEmpty }
        }
        return (ready, since, incomplete)
    }

    var listenerCount: Int { state.withLock { $0.table.count } }

    /// Changes the listener table in a locked step, reporting the number of listeners when it
    /// changed (in that step, so reports come in the order of the changes).
    private func changeTable<R>(_ body: (inout State) -> R) -> R {
        state.withLock { state in
            let before = state.table.count
            let result = body(&state)
            if state.table.count != before { onListenerCountChange?(state.table.count) }
            return result
        }
    }

    // MARK: Listening

    /// Why a listener could not be registered.
    enum RegistrationError: Error, Sendable {
        /// A listener with this key runs already: the answer must not name its id, or the client
        /// would take it for the running listener's end.
        case duplicate(TandemError)
        /// Anything else, answering the listen.
        case refused(TandemError)

        /// The error frame that answers the listen of `key`.
        func answer(to key: ListenerKey) -> ServerMessage {
            switch self {
            case .duplicate(let error): .error(id: nil, error)
            case .refused(let error): .error(id: key.target, error)
            }
        }
    }

    /// Registers a listener at once, before anything else the connection sent is handled, so an
    /// `unlisten` right behind it finds it: refused if its key is taken, if its connection runs
    /// `limit` listeners already, or if its query is invalid. It then waits for ``load(_:target:resumeFrom:)``.
    /// A `readGuard` checks every document the listener is sent, and stops it at the first refusal.
    /// A `notify` listener is sent each commit's version only, with no changes.
    func register(_ key: ListenerKey, target: ListenTarget, outbox: SessionOutbox, limit: Int, readGuard: ReadGuard? = nil, restricted: Bool = false,
                  notify: Bool = false) -> Result<Void, RegistrationError> {
        var listener: ListenerState
        do {
            listener = try ListenerState(key: key, target: target, outbox: outbox, readGuard: readGuard, restricted: restricted, notify: notify)
        } catch {
            return .failure(.refused(error))
        }
        let admitted = changeTable { state -> Result<Void, RegistrationError> in
            if state.table[key] != nil {
                return .failure(.duplicate(TandemError.invalidArgument("A listener with id \(key.target) is already running on this connection; use a new id.")))
            }
            if state.table.count(ofSession: key.session) >= limit {
                return .failure(.refused(TandemError(.resourceExhausted, "This connection already runs \(limit) listeners, the most allowed; stop one (unlisten) first.")))
            }
            state.registrations += 1
            listener.registration = state.registrations
            state.table.insert(listener)
            return .success(())
        }
        // A session closes its outbox before removing its listeners: one registered as it closed is
        // either removed by it or sees the outbox closed here.
        if case .success = admitted, outbox.isClosed { unlisten(key) }
        return admitted
    }

    /// Loads a registered listener's snapshot (or its changes since `resumeFrom`), sends that, then
    /// makes it live. A failure is sent as an error frame answering the listen, and frees its place.
    /// Nothing happens if the listener was stopped meanwhile.
    func load(_ key: ListenerKey, target: ListenTarget, resumeFrom: Version?) async {
        guard let listener = state.withLock({ $0.table[key] }), case .loading = listener.phase else { return }
        let registration = listener.registration
        do {
            let load: Load
            if listener.notify {
                // Nothing to read: the version it starts at is all it is told.
                load = Load(changes: [], isSnapshot: resumeFrom == nil, reset: false, version: try await store.currentVersion(), members: nil)
            } else {
                load = try await initialLoad(key, registration: registration, target: target, resumeFrom: resumeFrom,
                                             snapshotOnly: listener.hasLimit || (listener.restricted && listener.compiled != nil))
            }
            activate(key, registration: registration, load)
        } catch {
            // Only if it is still the same listener: an unlisten and a new listen with its id may
            // have come meanwhile.
            let removed = changeTable { state -> Bool in
                guard state.table[key]?.registration == registration else { return false }
                state.table.remove(key)
                return true
            }
            if removed {
                listener.outbox.send(.error(id: key.target, error as? TandemError ?? TandemError(.unavailable, "The listener could not load: \(error).")))
            }
        }
    }

    /// Registers and loads a listener (see ``register(_:target:outbox:limit:readGuard:restricted:)``); a refusal is sent
    /// as an error frame.
    func listen(_ key: ListenerKey, target: ListenTarget, resumeFrom: Version?, outbox: SessionOutbox, limit: Int = .max) async {
        switch register(key, target: target, outbox: outbox, limit: limit) {
        case .success:
            await load(key, target: target, resumeFrom: resumeFrom)
        case .failure(let refusal):
            outbox.send(refusal.answer(to: key))
        }
    }

    /// Stops one listener.
    func unlisten(_ key: ListenerKey) {
        changeTable { _ = $0.table.remove(key) }
    }

    /// Stops every listener of a session.
    func removeSession(_ session: Int) {
        changeTable { state in
            for key in state.table.keys(ofSession: session) { state.table.remove(key) }
        }
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

    /// `snapshotOnly` (a limit listener, or a filtered one under access rules) loads a snapshot
    /// that replaces what the client had (`reset`) instead of resuming.
    private func initialLoad(_ key: ListenerKey, registration: Int, target: ListenTarget, resumeFrom: Version?, snapshotOnly: Bool) async throws -> Load {
        if let resumeFrom, !snapshotOnly {
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
                return try await snapshot(key, registration: registration, target, reset: true)
            }
        }
        // A snapshot in place of a resume asked for says so (`reset`): it is the whole result.
        return try await snapshot(key, registration: registration, target, reset: resumeFrom != nil)
    }

    private func snapshot(_ key: ListenerKey, registration: Int, _ target: ListenTarget, reset: Bool) async throws -> Load {
        if let query = target.query, query.operations.isEmpty,
           let version = try await store.encodedSnapshot(target, groupSize: framing, frames: { [self] frame in
               sendSnapshotFrame(frame, to: key, registration: registration, reset: reset)
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
    private func sendSnapshotFrame(_ frame: EncodedSnapshotFrame, to key: ListenerKey, registration: Int, reset: Bool) -> Bool {
        let outbox = state.withLock { state -> SessionOutbox? in
            guard let listener = state.table[key], listener.registration == registration, case .loading = listener.phase else { return nil }
            return listener.outbox
        }
        guard let outbox else { return false }
        return outbox.send(text: WireWriter.batch(target: key.target, changes: frame.changes, version: frame.version,
                                                  isSnapshot: true, reset: reset, more: !frame.isLast))
    }

    /// Sends a listener its loaded batch and the commits buffered meanwhile, and makes it live.
    private func activate(_ key: ListenerKey, registration: Int, _ load: Load) {
        var requery = false
        var reloadFrom: Version?
        defer { if let reloadFrom { requeryQueue.yield((key, registration, reloadFrom: reloadFrom)) } }
        state.withLock { state in
            defer {
                // Loaded while the store said it missed commits: loads again from where it is now.
                if state.staleLoads[key] == registration {
                    state.staleLoads[key] = nil
                    reloadFrom = state.table.update(key) { listener -> Version? in
                        guard listener.registration == registration, case .live(let version) = listener.phase else { return nil }
                        listener.phase = .loading([])
                        return version
                    } ?? nil
                    if reloadFrom != nil { requery = false }
                }
            }
            if let listener = state.table[key], listener.registration == registration, listener.readGuard != nil,
               case .loading(let buffered) = listener.phase {
                // A guarded listener (of one document) is checked against all it would be sent:
                // the document as loaded (or its absence), then each buffered change.
                let loaded = load.isSnapshot && load.changes.isEmpty
                    ? [RemoteChange(path: listener.readGuard!.path, document: nil, version: load.version, mutationID: nil)]
                    : load.changes
                let later = buffered.filter { $0.version > load.version }.flatMap(\.changes)
                if let refusal = listener.refusal(of: loaded) ?? listener.refusal(of: later) {
                    revoke(key, refusal, in: &state)
                    return
                }
            }
            state.table.update(key) { listener in
                guard listener.registration == registration, case .loading(let buffered) = listener.phase else { return }
                if !load.sent {
                    send(load.changes, to: key, listener: listener, version: load.version, isSnapshot: load.isSnapshot, reset: load.reset)
                }
                // Kept only where it is read: to tell which documents left a filtered query, and
                // to diff a limit query's re-read. Without either, every document in scope
                // belongs, and a table of them would only cost memory and the one-step path.
                listener.members = listener.compiled != nil || listener.hasLimit ? load.members : nil
                listener.phase = .live(load.version)
                if listener.notify {
                    // The last commit it missed while it loaded, if any, by its version alone.
                    if let last = buffered.last, last.version > load.version {
                        send([], to: key, listener: listener, version: last.version, isSnapshot: false, reset: false)
                        listener.phase = .live(last.version)
                    }
                    return
                }
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
            }
        }
        if requery { startRequery(key, registration: registration) }
    }

    // MARK: Commits

    /// Delivers visible commits, in version order: each listener gets, in one batch, the changes
    /// of all of them that affect it (whole commits, oldest first), at the version of the last.
    func publish(_ batch: CommittedBatch) {
        publish([batch])
    }

    /// Returns whether any change was in some listener's scope (false: nothing was sent).
    @discardableResult
    func publish(_ batches: [CommittedBatch]) -> Bool {
        // One list of every change; each keeps its commit's version.
        let changes = batches.count == 1 ? batches[0].changes : batches.flatMap(\.changes)
        var requeries: [(ListenerKey, Int)] = []
        // Guarded listeners sent a document their rules no longer let them read.
        var revoked: [(ListenerKey, TandemError)] = []
        // Sent under the hub's lock, on purpose: a session outbox's send only queues bytes (no I/O,
        // never waits), and sending inside the lock is what keeps every listener's stream in order
        // — a snapshot (sent by `activate` under the same lock) ahead of the commits after it, and
        // commits in version order. Sends gathered and made after unlocking could interleave with
        // another publish or activation and reach a connection out of order.
        let reached = state.withLock { state in
            // The changes each group's scope holds.
            var affected: [Int: [Int]] = [:]
            for (index, change) in changes.enumerated() {
                state.table.groups(touching: change.path) { affected[$0, default: []].append(index) }
            }
            // Listeners that get the same changes share one encoding of them, and those of one
            // connection share one message naming them all.
            var encoded: [[Int]: [UInt8]] = [:]
            for (id, indices) in affected {
                state.table.updateGroup(id) { group in
                    let published = changes[indices[indices.count - 1]].version
                    if let plain = group.plain {
                        // Every listener takes every commit whole: one step per connection.
                        let codes = indices.map { $0 * 2 }
                        for connection in plain {
                            Self.send([(codes, connection.targets, published)], of: changes, to: connection.outbox, encoded: &encoded)
                        }
                        group.publishedThrough = published
                        return
                    }
                    defer {
                        group.publishedThrough = published
                        group.refresh()
                    }
                    var shared: [Int]?
                    var connection: (session: Int, outbox: SessionOutbox)?
                    var deliveries: [(codes: [Int], targets: [Int], version: Version)] = []
                    for index in group.members.indices {
                        let key = group.members[index].key
                        switch group.members[index].receive(indices, of: changes, shared: &shared) {
                        case .deliver(let codes, let outbox):
                            if group.members[index].readGuard != nil,
                               let refusal = group.members[index].refusal(of: ListenerState.changes(codes, of: changes)) {
                                revoked.append((key, refusal))
                                continue
                            }
                            if connection?.session != key.session {
                                if let connection { Self.send(deliveries, of: changes, to: connection.outbox, encoded: &encoded) }
                                connection = (key.session, outbox)
                                deliveries = []
                            }
                            // A notify listener is told the version of the last change it would have
                            // been sent, and no changes.
                            let version = changes[codes[codes.count - 1] / 2].version
                            let sent = group.members[index].notify ? [] : codes
                            if let at = deliveries.firstIndex(where: { $0.codes == sent && $0.version == version }) {
                                deliveries[at].targets.append(key.target)
                            } else {
                                deliveries.append((sent, [key.target], version))
                            }
                        case .requery:
                            requeries.append((key, group.members[index].registration))
                        case .nothing:
                            break
                        }
                    }
                    if let connection { Self.send(deliveries, of: changes, to: connection.outbox, encoded: &encoded) }
                }
            }
            for (key, refusal) in revoked { revoke(key, refusal, in: &state) }
            return !affected.isEmpty
        }
        for (key, registration) in requeries { startRequery(key, registration: registration) }
        return reached
    }

    /// Stops a listener whose rules no longer let it read what it would be sent, and tells its
    /// connection why (an error frame answering its listen).
    private func revoke(_ key: ListenerKey, _ refusal: TandemError, in state: inout State) {
        let before = state.table.count
        if let listener = state.table.remove(key) {
            listener.outbox.send(.error(id: key.target, refusal))
        }
        if state.table.count != before { onListenerCountChange?(state.table.count) }
    }

    /// Sends one connection its listeners' deliveries, a message for each distinct set of changes
    /// (naming every listener that gets it), at the version of the last commit in it (no changes:
    /// notify listeners, told that version alone).
    private static func send(_ deliveries: [(codes: [Int], targets: [Int], version: Version)], of changes: [RemoteChange], to outbox: SessionOutbox, encoded: inout [[Int]: [UInt8]]) {
        for (codes, targets, version) in deliveries {
            let wire: [UInt8]
            if let cached = encoded[codes] {
                wire = cached
            } else {
                wire = WireWriter.changes(ListenerState.changes(codes, of: changes))
                encoded[codes] = wire
            }
            outbox.send(changes: wire, targets: targets, version: version)
        }
    }

    /// Asks `run()` to read a limit listener's query again.
    private func startRequery(_ key: ListenerKey, registration: Int) {
        requeryQueue.yield((key, registration, reloadFrom: nil))
    }

    /// Reads a limit query again and sends the difference from what the listener has.
    private func requery(_ key: ListenerKey, registration: Int) async {
        guard let target = state.withLock({ state in state.table[key].flatMap { $0.registration == registration ? $0.target : nil } }) else { return }
        do {
            let snapshot = try await store.read(target)
            var again = false
            state.withLock { state in
                state.table.update(key) { listener in
                    guard listener.registration == registration, case .loading(let buffered) = listener.phase else { return }
                    // The store said it missed commits meanwhile: read again, with nothing sent yet.
                    if state.staleLoads[key] == registration {
                        state.staleLoads[key] = nil
                        listener.phase = .loading([])
                        again = true
                        return
                    }
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
                }
            }
            if again { startRequery(key, registration: registration) }
        } catch {
            let outbox = changeTable { state -> SessionOutbox? in
                guard state.table[key]?.registration == registration else { return nil }
                return state.table.remove(key)?.outbox
            }
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
