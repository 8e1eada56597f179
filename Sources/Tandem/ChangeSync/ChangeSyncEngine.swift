import Foundation
import Observation
import Synchronization
import TandemCore

/// A change-token sync engine for an app that keeps its own store (a GRDB table, files): the server
/// is a mailbox of changes. Send the records you changed; fetch everything since your token; the
/// engine resolves conflicts, retries, and keeps what is pending on disk.
///
/// ```swift
/// let engine = try ChangeSyncEngine(client: client, configuration: .init(zoneName: "notes"), state: savedState)
/// engine.delegate = self                       // didFetchModifications, didSendModifications, …
/// engine.start()
/// try engine.sendChanges(modify: [note], delete: [])   // on disk before it returns
/// engine.fetchChanges(token: savedState?.token)
/// ```
///
/// - Account: the client's signed-in user. Nothing runs while nobody is; another user is another
///   account, with its own queue and token.
/// - Zone: the user's records at `users/{uid}/zones/{zone}/records/{id}`; made when the engine
///   first runs. Subscription: a live listener on it; each change it sees schedules a fetch.
/// - Token: a version of the zone's change feed. Change tag: each record's version, which a
///   modification is sent against (a record changed meanwhile on the server is a conflict).
///
/// Operations run one at a time (a pure state machine decides which, and when): make the
/// zone, subscribe, send (batches of at most 400 records and 2 MB), fetch (pages, following
/// `hasMore`). Failures that may pass are retried with a backoff (or after the server's
/// `retryAfter`); after `maxRetries`, or an error no retry changes, the engine halts and tells its
/// delegate; ``start()`` resumes it. A token older than the server keeps is dropped
/// (`didUpdateChangeToken(nil)`) and everything fetched again from the beginning, at once; refused
/// again before that fetch ends, it is retried with the backoff. It never changes the app's data on
/// its own: every result, and every failure, is the app's to apply.
public final class ChangeSyncEngine: Observable, Sendable {
    /// How a `ChangeSyncEngine` runs: its zone, the size of its sends, its retries, how it resolves
    /// conflicts and seals properties, and where it keeps its queue.
    ///
    /// Every setting but the zone has a default; change the ones you need, then pass it to
    /// `init(client:configuration:state:)`, which reads it once.
    public struct Configuration: Sendable {
        /// The zone: the scope of the user's records.
        public var zoneName: String
        /// Retries of one failed operation in a row before the engine halts (5 by default).
        public var maxRetries = 5
        /// The most records in one send (400 by default). Fetched modifications reach the delegate in
        /// lists of at most this many too. A value below one is taken as one.
        public var maxRecordsPerBatch = 400
        /// The most bytes of records in one send (2 MiB by default); a single larger record goes alone.
        public var maxBytesPerBatch = 2 << 20
        /// Batches sent without waiting for the answers to the ones before (each record still has
        /// one change out at a time, and the server applies them in the order sent).
        public var maxSendsInFlight = 4
        /// Changes asked for per fetched page.
        public var fetchPageSize = 1_000
        /// Decides conflicts the delegate does not.
        public var resolver: ConflictResolver = .fieldLevelLastWriterWins
        /// The keys `.encryptedValue` properties are sealed with; nil when records have none.
        public var encryption: RecordEncryption?
        /// Where the engine keeps its queue (`changes-<zone>.sqlite`). Default: the client's
        /// storage directory.
        public var directory: URL?
        /// This device's wall clock, in milliseconds, for the stamps of property changes.
        public var wallClock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1_000) }

        /// A configuration for the zone `zoneName`, every other setting at its default.
        ///
        /// The zone's name is a document id (not empty, no `/`, not `.` or `..`): the engine's
        /// initializer throws on any other.
        public init(zoneName: String = "default") {
            self.zoneName = zoneName
        }
    }

    /// The engine's state for the app to store with the data it fetched (opaque; `Codable`), and
    /// give back to the next engine it makes.
    public struct State: Sendable, Hashable, Codable {
        /// The user this state belongs to (their uid); nil when nobody was signed in. The state
        /// starts over, with no token, when another user signs in (or one given is another user's).
        public internal(set) var account: String?
        /// Where the last fetch of this account's changes ended; nil before the first one, and after
        /// the server said the token expired (the engine then fetches everything again).
        public internal(set) var token: ChangeToken?
        var zoneReady = false

        /// An empty state: no account, no token. What an engine starts from the first time.
        public init() {}
    }

    /// What the engine is doing, as one value (``states()``).
    public struct Status: Sendable, Hashable {
        /// The signed-in user the engine runs for; nil while nobody is signed in.
        public var account: String?
        /// Whether the engine was started and has neither stopped nor halted since. A running engine
        /// may be waiting: for a sign-in, a backoff, or something to do.
        public var isRunning: Bool
        /// Whether the engine halted on an error (`ChangeSyncEngine.lastError`); `start()` clears it.
        public var isHalted: Bool
        /// Operations waiting or running; each pending record counts one.
        public var pendingCount: Int
        /// The queue of the operation running now (`createZone`, `subscribe`, `send` or `fetch`); nil
        /// when none runs.
        public var currentQueue: String?
        /// Failures in a row of the operation at the front of the current queue; 0 after a success.
        public var retryCount: Int
        /// Where the last fetch ended (the token of `ChangeSyncEngine.state`).
        public var token: ChangeToken?
    }

    private struct Core {
        var machine: ChangeSyncStateMachine
        var state: State
        var clock: HybridLogicalClock
        var subscription: Task<Void, Never>?
        var wake: Task<Void, Never>?
        /// The page after a page that said `hasMore`, asked for while that page is handled.
        var readAhead: ReadAhead?
        /// A read of the whole feed from version 0 under way, and the records it brought so far.
        var sweep: Sweep?
        var lastError: (any Error)?
        var delegate: WeakDelegate?
        var observers: [Int: AsyncStream<ChangeSyncEvent>.Continuation] = [:]
        var statusObservers: [Int: AsyncStream<Status>.Continuation] = [:]
        var signals: [Int: AsyncStream<Void>.Continuation] = [:]
        var nextObserver = 0
        var status: Status?

        /// Cancels the page read ahead, if any: it is of no use now.
        mutating func dropReadAhead() {
            readAhead?.page.cancel()
            readAhead = nil
        }
    }

    /// A read of an account's whole feed from version 0 (a new device, or a token the server no
    /// longer keeps changes for): its pages continue it (`fromStart`), and once it reaches the
    /// end, a record this engine knew of that it did not bring was deleted long ago (its tombstone
    /// pruned) and is told as a deletion.
    private struct Sweep {
        var account: String
        var seen: Set<String> = []
    }

    /// A send the machine started: prepared and put on the wire by the send lane, in the order
    /// the machine started them.
    private struct SendJob: Sendable {
        var batch: Int
        var changes: [ChangeSyncStateMachine.PendingChange]
        var account: String
        var attempt: Int
    }

    /// A page of the feed asked for before its fetch runs.
    private struct ReadAhead {
        var account: String
        var token: ChangeToken
        var page: Task<ChangePage, any Error>
    }

    private final class WeakDelegate: Sendable {
        // Only read and written under the core's lock.
        nonisolated(unsafe) weak var value: (any ChangeSyncEngineDelegate)?
        init(_ value: any ChangeSyncEngineDelegate) { self.value = value }
    }

    /// The configuration the engine was made with.
    public let configuration: Configuration
    let client: TandemClient
    let store: ChangeQueueStore
    private let core: Mutex<Core>
    /// Runs between a change's queueing in the file and its handing to the machine, for tests that
    /// switch the user in that gap.
    package let afterQueueing = Mutex<QueueingHook?>(nil)
    private let registrar = ObservationRegistrar()
    private let started = ContinuousClock.now
    private let authTask = Mutex<Task<Void, Never>?>(nil)
    /// Sends, in the order the machine started them: each is given its mutations' sequences and
    /// put on the wire before the next one is.
    private let sendLane: AsyncStream<SendJob>.Continuation

    /// - Parameters:
    ///   - client: the connection to the server the zone lives on.
    ///   - configuration: the zone, batch sizes, retries and encryption.
    ///   - state: what the app stored of the last engine's ``state`` (nil the first time).
    public init(client: TandemClient, configuration: Configuration = Configuration(), state: State? = nil) throws {
        guard RecordFields.isValidID(configuration.zoneName) else {
            throw TandemError.invalidArgument("'\(configuration.zoneName)' cannot name a zone: a document id, with no '/'.")
        }
        self.configuration = configuration
        self.client = client
        let directory = configuration.directory ?? client.configuration.storageDirectory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        store = try ChangeQueueStore(path: directory.appendingPathComponent("changes-\(LocalStorageLocation.fileName(for: configuration.zoneName)).sqlite").path)
        var limits = ChangeSyncStateMachine.Limits()
        limits.maxRetries = configuration.maxRetries
        limits.maxRecordsPerBatch = max(1, configuration.maxRecordsPerBatch)
        limits.maxBytesPerBatch = max(1, configuration.maxBytesPerBatch)
        limits.maxSendsInFlight = max(1, configuration.maxSendsInFlight)
        core = Mutex(Core(machine: ChangeSyncStateMachine(limits: limits), state: state ?? State(), clock: HybridLogicalClock(node: client.clientID)))
        let (jobs, sendLane) = AsyncStream.makeStream(of: SendJob.self)
        self.sendLane = sendLane
        Task { [weak self] in
            for await job in jobs {
                guard let self else { return }
                await self.startSend(job)
            }
        }
        let stream = client.authStates()
        authTask.withLock { task in
            task = Task { [weak self] in
                for await auth in stream {
                    guard let self else { return }
                    self.accountChanged(auth.uid)
                }
            }
        }
        accountChanged(client.authState.uid)
    }

    deinit {
        authTask.withLock { $0?.cancel() }
        sendLane.finish()
        core.withLock { core in
            core.subscription?.cancel()
            core.wake?.cancel()
            core.dropReadAhead()
            core.observers.values.forEach { $0.finish() }
            core.statusObservers.values.forEach { $0.finish() }
            core.signals.values.forEach { $0.finish() }
        }
    }

    /// Told of every result; held weakly.
    public var delegate: (any ChangeSyncEngineDelegate)? {
        get { core.withLock { $0.delegate?.value } }
        set { core.withLock { $0.delegate = newValue.map(WeakDelegate.init) } }
    }

    // MARK: Observable state

    /// What the app stores (its token, its account).
    public var state: State {
        registrar.access(self, keyPath: \.state)
        return core.withLock { $0.state }
    }

    /// What the engine is doing now, as one value; observable. `states()` streams the same values.
    public var status: Status {
        registrar.access(self, keyPath: \.status)
        return core.withLock { Self.status(of: $0) }
    }

    /// Whether the engine was started and has neither stopped nor halted since (`status.isRunning`).
    public var isRunning: Bool { status.isRunning }
    /// Operations waiting or running, each pending record counting one (`status.pendingCount`).
    public var pendingCount: Int { status.pendingCount }
    /// Where the last fetch ended (`status.token`); nil before the first one.
    public var token: ChangeToken? { status.token }

    /// The error the engine last halted with, or the last failure it met.
    public var lastError: (any Error)? {
        registrar.access(self, keyPath: \.lastError)
        return core.withLock { $0.lastError }
    }

    private static func status(of core: Core) -> Status {
        Status(account: core.machine.account, isRunning: core.machine.isRunning, isHalted: core.machine.isHalted,
               pendingCount: core.machine.pendingCount, currentQueue: core.machine.currentQueue?.rawValue,
               retryCount: core.machine.retryCount, token: core.state.token)
    }

    /// Every event, from now on, to this subscriber (each subscriber gets each event).
    public func events() -> AsyncStream<ChangeSyncEvent> {
        subscribe(\.observers)
    }

    /// The engine's status now, then each time it changes.
    public func states() -> AsyncStream<Status> {
        subscribe(\.statusObservers) { Self.status(of: $0) }
    }

    /// A signal after each event and each change of status: for tests that await a state.
    package func changeSignals() -> AsyncStream<Void> {
        subscribe(\.signals)
    }

    /// A stream fed from `subscribers`, starting with `first` (read in the same locked step as the
    /// subscription, so nothing comes between), until its reader stops.
    private func subscribe<Element: Sendable>(_ subscribers: any WritableKeyPath<Core, [Int: AsyncStream<Element>.Continuation]> & Sendable,
                                             first: ((Core) -> Element)? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let token = core.withLock { core -> Int in
            core.nextObserver += 1
            core[keyPath: subscribers][core.nextObserver] = continuation
            if let first { continuation.yield(first(core)) }
            return core.nextObserver
        }
        continuation.onTermination = { [weak self] _ in _ = self?.core.withLock { $0[keyPath: subscribers].removeValue(forKey: token) } }
        return stream
    }

    private func signal() {
        for signal in core.withLock({ Array($0.signals.values) }) { signal.yield() }
    }

    // MARK: The app's calls

    /// Runs the engine (again, after a halt: with no failure counted).
    public func start() {
        accountChanged(client.authState.uid)
        handle(.start(now: now))
    }

    /// Stops the engine: nothing runs until ``start()``; everything queued stays queued (on disk),
    /// the operation running included, and an answer to it is not taken.
    public func stop() {
        let subscription = core.withLock { core -> Task<Void, Never>? in
            defer { core.subscription = nil }
            core.wake?.cancel()
            core.wake = nil
            core.dropReadAhead()
            return core.subscription
        }
        subscription?.cancel()
        handle(.stop)
        handle(.unsubscribed(now: now))
    }

    /// Queues records to save and records to delete, durably: they are in the engine's file when
    /// this returns, and are sent while the engine runs, in order, each exactly once. A record
    /// queued again before it is sent is sent once, as it is last. Throws, queueing nothing, when
    /// nobody is signed in, or a record cannot be stored (its id, a property's name, an encrypted
    /// property with no keys).
    public func sendChanges<Record: SyncableRecord>(modify records: [Record], delete deletedIDs: [String]) throws {
        try sendChanges(modify: records.map(SyncedRecord.init), delete: deletedIDs.map { RecordDeletion(recordID: $0, recordType: Record.recordType) })
    }

    /// As above, for records of any types.
    public func sendChanges(modify records: [SyncedRecord], delete deletions: [RecordDeletion]) throws {
        // Who the client says is signed in now, even before its stream of sign-ins told the engine.
        accountChanged(client.authState.uid)
        guard let account = core.withLock({ $0.machine.account }) else {
            throw TandemError(.unauthenticated, "Nobody is signed in: a change belongs to a user's account. Sign in, then send it.")
        }
        for record in records { try RecordCoding.validate(record, encryption: configuration.encryption) }
        for deletion in deletions where !RecordFields.isValidID(deletion.recordID) {
            throw TandemError.invalidArgument("'\(deletion.recordID)' cannot name a record: ids are not empty, hold no '/', and are not '.' or '..'.")
        }
        // Each property the app changed gets a new stamp; the others keep theirs. Changed since the
        // newest state this device queued of the record, while one is queued (its send may not be
        // answered yet), else since the server's state.
        let ids = records.map(\.id)
        var bases = try store.newestQueued(account: account, ids: ids)
        for (id, base) in try store.bases(account: account, ids: ids.filter { bases[$0] == nil }, encryption: configuration.encryption) { bases[id] = base }
        let wall = configuration.wallClock()
        let stamped = core.withLock { core in
            records.map { record -> SyncedRecord in
                var record = record
                let base = bases[record.id]
                var stamps = base?.metadata.stamps ?? [:]
                for (name, value) in record.properties where base?.properties[name] != value {
                    stamps[name] = core.clock.stamp(wall: wall)
                }
                // A property removed is a change too.
                for name in base?.properties.keys ?? [:].keys where record.properties[name] == nil {
                    stamps[name] = core.clock.stamp(wall: wall)
                }
                record.metadata.stamps = stamps
                return record
            }
        }
        let rows = try store.enqueue(account: account, saves: stamped, deletions: deletions.map { ($0.recordID, $0.recordType) })
        afterQueueing.withLock { $0 }?.body()
        handle(.enqueue(rows.map(\.change), now: now), for: account)
    }

    /// Fetches the changes after `token` (nil: every record), page by page. A fetch for a token
    /// already queued is not queued twice.
    public func fetchChanges(token: ChangeToken?) {
        handle(.fetch(token, now: now))
    }

    // MARK: The shell

    private var now: Duration { ContinuousClock.now - started }

    private func recordsPath(_ account: String) throws -> CollectionPath {
        try CollectionPath("users/\(account)/zones/\(configuration.zoneName)/records")
    }

    private func accountChanged(_ uid: String?) {
        let changed = core.withLock { $0.machine.account != uid }
        guard changed else { return }
        var rows: [ChangeQueueStore.Row] = []
        if let uid {
            do {
                rows = try store.pending(account: uid)
            } catch {
                // The account's queue cannot be read: nothing of it is sent; the app hears why.
                noteFailure(error)
            }
        }
        let subscription = core.withLock { core -> Task<Void, Never>? in
            defer { core.subscription = nil }
            core.dropReadAhead()
            if core.state.account != uid {
                core.state = State()
                core.state.account = uid
            }
            return core.subscription
        }
        subscription?.cancel()
        let state = core.withLock { $0.state }
        handle(.account(uid, pending: rows.map(\.change), token: state.token, zoneReady: state.zoneReady, now: now))
        emit(.accountChanged(uid)) { $0.syncEngine(self, didChangeAccount: uid) }
    }

    /// Hands the machine `event`. With `account`, only while that account is the machine's: the
    /// changes of an event made for an account that was switched away from meanwhile (queued, or
    /// a conflict's resolution, while the user changed) stay in that account's stored queue, and
    /// go when it signs in again; they never join another account's queue, which would send them
    /// into that user's zone under that user's writer. Checked under the same lock the machine is
    /// changed under, so no switch comes between.
    private func handle(_ event: ChangeSyncStateMachine.Event, for account: String? = nil) {
        let (actions, changedState) = core.withLock { core -> ([ChangeSyncStateMachine.Action], Bool) in
            if let account, core.machine.account != account { return ([], false) }
            var actions = core.machine.handle(event)
            let before = core.state
            if core.machine.account == core.state.account {
                core.state.token = core.machine.token
                core.state.zoneReady = core.machine.zoneReady
            }
            // Sends go to the lane here, under the lock, so they reach it in the order the machine
            // started them.
            actions.removeAll { action in
                guard case .run(.send(let batch, let changes), let attempt) = action, let account = core.machine.account else { return false }
                sendLane.yield(SendJob(batch: batch, changes: changes, account: account, attempt: attempt))
                return true
            }
            return (actions, before != core.state)
        }
        for action in actions { perform(action) }
        publishStatus(stateChanged: changedState)
    }

    private func publishStatus(stateChanged: Bool) {
        let (status, observers, changed) = core.withLock { core -> (Status, [AsyncStream<Status>.Continuation], Bool) in
            let status = Self.status(of: core)
            defer { core.status = status }
            return (status, Array(core.statusObservers.values), core.status != status)
        }
        if changed {
            registrar.withMutation(of: self, keyPath: \.status) {}
            observers.forEach { $0.yield(status) }
            signal()
        }
        if stateChanged { registrar.withMutation(of: self, keyPath: \.state) {} }
    }

    private func perform(_ action: ChangeSyncStateMachine.Action) {
        switch action {
        case .run(let operation, let attempt):
            Task { await self.run(operation, attempt: attempt) }
        case .wake(let at):
            let task = Task { [weak self] in
                guard let self else { return }
                try? await Task.sleep(until: self.started + at, clock: .continuous)
                guard !Task.isCancelled else { return }
                self.handle(.tick(now: self.now))
            }
            core.withLock { core in
                core.wake?.cancel()
                core.wake = task
            }
        case .tokenReset:
            emit(.tokenUpdated(nil)) { $0.syncEngine(self, didUpdateChangeToken: nil) }
        case .halted(let error):
            core.withLock { $0.lastError = error }
            registrar.withMutation(of: self, keyPath: \.lastError) {}
            emit(.stopped(error)) { $0.syncEngine(self, didStopWithError: error) }
        case .settled, .persist:
            break
        }
    }

    /// Whether the operation `attempt` still runs, for `account`.
    private func isRunning(_ attempt: Int, account: String) -> Bool {
        core.withLock { $0.machine.account == account && $0.machine.running.contains { $0.attempt == attempt } }
    }

    /// Whether `account` is still the one the engine runs for.
    private func isCurrent(_ account: String) -> Bool {
        core.withLock { $0.machine.account == account }
    }

    /// A failure that stops nothing: kept as `lastError`, for the app to see.
    private func noteFailure(_ error: any Error) {
        core.withLock { $0.lastError = error }
        registrar.withMutation(of: self, keyPath: \.lastError) {}
    }

    /// Tells the delegate, then the event stream's subscribers (who then find the delegate's
    /// store up to date).
    private func emit(_ event: ChangeSyncEvent, _ call: (any ChangeSyncEngineDelegate) -> Void) {
        let (observers, delegate) = core.withLock { (Array($0.observers.values), $0.delegate?.value) }
        if let delegate { call(delegate) }
        for observer in observers { observer.yield(event) }
        signal()
    }

    private func run(_ operation: ChangeSyncStateMachine.Operation, attempt: Int) async {
        guard let account = core.withLock({ $0.machine.account }) else { return }
        switch operation {
        case .createZone:
            await createZone(account, attempt: attempt)
        case .subscribe:
            await subscribe(account, attempt: attempt)
        case .send(let batch, let changes):
            // Sends go through the lane (``handle(_:)``); one that reaches here goes there too.
            sendLane.yield(SendJob(batch: batch, changes: changes, account: account, attempt: attempt))
        case .fetch(let token):
            await fetch(after: token, account: account, attempt: attempt)
        }
    }

    private func createZone(_ account: String, attempt: Int) async {
        do {
            let zone = try DocumentPath("users/\(account)/zones/\(configuration.zoneName)")
            _ = try await client.commit([.merge(zone, ["name": .string(configuration.zoneName)], fields: [FieldPath("name")])])
            handle(.succeeded(.zoneCreated, attempt: attempt, now: now))
        } catch {
            handle(.failed(Self.classify(error), attempt: attempt, now: now))
        }
    }

    /// A listener on the zone's records from the server's version now: its first batch says it is
    /// up; each later one is a push. It resumes by itself across reconnects.
    private func subscribe(_ account: String, attempt: Int) async {
        let target: ListenTarget
        let version: Version
        do {
            target = .collection(try recordsPath(account), Query())
            let zone = try DocumentPath("users/\(account)/zones/\(configuration.zoneName)")
            guard case .documents(_, _, let read) = try await client.request({ .get(id: $0, path: zone) }) else {
                throw TandemError(.internal, "The server answered a get with the wrong message.")
            }
            version = core.withLock { $0.state.token?.version } ?? read
        } catch {
            handle(.failed(Self.classify(error), attempt: attempt, now: now))
            return
        }
        // Told versions only: the fetch reads what changed, so nothing comes twice.
        let stream = client.notifications(of: target, resumeFrom: version)
        let task = Task { [weak self] in
            var first = true
            do {
                for try await _ in stream {
                    guard let self else { return }
                    if first {
                        first = false
                        self.handle(.succeeded(.subscribed, attempt: attempt, now: self.now))
                    }
                    // A page read ahead may predate what was pushed: read again.
                    self.dropReadAhead()
                    self.handle(.pushed(now: self.now))
                }
            } catch {
                guard let self, !Task.isCancelled else { return }
                if first {
                    self.handle(.failed(Self.classify(error), attempt: attempt, now: self.now))
                    return
                }
                self.noteFailure(error)
            }
            guard let self, !Task.isCancelled else { return }
            self.handle(.unsubscribed(now: self.now))
        }
        let old = core.withLock { core -> Task<Void, Never>? in
            defer { core.subscription = task }
            return core.subscription
        }
        old?.cancel()
    }

    /// Gives a send its mutations (stored before anything is sent) and puts it on the wire; its
    /// answer is awaited apart, so the next send can go meanwhile.
    private func startSend(_ job: SendJob) async {
        let (batch, account, attempt) = (job.batch, job.account, job.attempt)
        // Taken back meanwhile (a send beside it failed, the engine stopped): its changes are queued
        // again, and go in their turn. Numbered and sent now, they could reach the server ahead of
        // the lower sequences sent again before them.
        guard isRunning(attempt, account: account) else { return }
        let rows: [ChangeQueueStore.Row]
        do {
            let encryption = configuration.encryption
            rows = try await store.prepare(account: account, records: try recordsPath(account), rowIDs: job.changes.map(\.rowID)) { row in
                guard let record = row.record else {
                    // Never read as a deletion: the queued state cannot be read, so nothing is sent.
                    throw TandemError(.dataLoss, "The queued change of record '\(row.recordID)' cannot be read from the engine's file; nothing of it was sent. Send the record again.")
                }
                return try RecordCoding.fields(of: record, encryption: encryption)
            }
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now))
            return
        }
        // Taken back while its mutations were stored: they go, as stored, in its turn.
        guard isRunning(attempt, account: account) else { return }
        guard !rows.isEmpty else {
            handle(.succeeded(.sent(batch: batch), attempt: attempt, now: now))
            return
        }
        // Atomic, unless a change in it goes one by one: one decision for the batch, at one version
        // (the server decides a request that is not atomic as one request per change). Brief:
        // the engine has what it sent, and needs only the versions.
        var request = WriteRequest(rows.map { $0.mutation! }, isAtomic: !rows.contains { $0.alone })
        request.isBrief = true
        let writes = client.startWrites([request])
        Task { await self.finishSend(batch, rows, writes, account: account, attempt: attempt) }
    }

    /// Takes a send's answer: results, conflicts and failures told, its changes settled.
    private func finishSend(_ batch: Int, _ rows: [ChangeQueueStore.Row], _ writes: TandemClient.PendingWrites, account: String, attempt: Int) async {
        let answer = await writes.acknowledgements()[0]
        // An answer to a send the machine took back (it is queued again, and will be sent again
        // with the same ids, and answered the same) is not taken: acting on it beside the send
        // again would settle, or send once more, what that one will.
        guard isRunning(attempt, account: account) else { return }
        let acknowledgements: [WriteAcknowledgement]
        switch answer {
        case .failure(let error):
            handle(.failed(Self.classify(error), attempt: attempt, now: now))
            return
        case .success(let answered):
            acknowledgements = answered
        }
        // Another user signed in meanwhile: nothing of this answer is taken or told (the app's store
        // and resolver are the other user's now). The changes stay queued for their account, with
        // their mutation ids: sent again when it is back, they are answered the same.
        guard isCurrent(account) else { return }
        var saved: [SentRecord] = []
        var deleted: [SentDeletion] = []
        var failed: [FailedRecord] = []
        var conflicts: [(row: ChangeQueueStore.Row, server: SyncedRecord?)] = []
        // What each answered change leaves as the server's state of its record, in order.
        var settlements: [(rowID: Int64, settlement: ChangeQueueStore.Settlement)] = []
        settlements.reserveCapacity(rows.count)
        // Refused where an atomic request decided it: maybe for another change's sake. Sent again,
        // one by one, under a new id, to learn its own fate.
        var undecided: [Int64] = []
        for (row, acknowledgement) in zip(rows, acknowledgements) {
            let id = row.mutation!.id!
            if acknowledgement.status == .refused, !row.alone {
                undecided.append(row.rowID)
                continue
            }
            switch acknowledgement.status {
            case .applied, .replayed:
                if row.isDeletion {
                    deleted.append(SentDeletion(recordID: row.recordID, recordType: row.recordType, mutationID: id))
                    settlements.append((row.rowID, .gone))
                } else {
                    if var record = row.record {
                        record.metadata.version = acknowledgement.version
                        saved.append(SentRecord(record: record, mutationID: id))
                    }
                    settlements.append((row.rowID, .sent(acknowledgement.version)))
                }
            case .refused where acknowledgement.error?.code == .failedPrecondition && !row.isDeletion:
                // Changed on the server since the version it was based on: the server's record now.
                // The refusal carries it; a plain write's refusal (one change) does not, so it is read.
                let server: SyncedRecord?
                do {
                    var current = acknowledgement.document
                    if current == nil { current = try await client.document(at: row.mutation!.path) }
                    server = try current.map {
                        try RecordCoding.record(id: row.recordID, fields: $0.data, version: $0.version, encryption: configuration.encryption)
                    }
                    settlements.append((row.rowID, current.map { .server($0.version, JSONText.encode(.object($0.data))) } ?? .gone))
                } catch {
                    failed.append(FailedRecord(recordID: row.recordID, mutationID: id, error: error))
                    settlements.append((row.rowID, .unchanged))
                    continue
                }
                conflicts.append((row, server))
            case .refused, .unknown:
                failed.append(FailedRecord(recordID: row.recordID, mutationID: id,
                                           error: acknowledgement.error ?? TandemError(.unknown, "The server no longer knows whether this change of '\(row.recordID)' applied; read the record.")))
                settlements.append((row.rowID, .unchanged))
            }
        }
        // Conflicts: the chosen record goes next; a record the server no longer has is reported.
        var resolved: [SyncedRecord] = []
        var unresolved: [(RecordConflict, SyncedRecord)] = []
        var resolutions: [(RecordConflict, SyncedRecord)] = []
        let delegate = core.withLock { $0.delegate?.value }
        var baseRecords: [String: SyncedRecord] = [:]
        do {
            baseRecords = try store.bases(account: account, ids: conflicts.map(\.row.recordID), encryption: configuration.encryption)
        } catch {
            // The conflicts go on without their base; the app hears why.
            noteFailure(error)
        }
        var conflictList: [RecordConflict] = []
        for (row, server) in conflicts {
            guard let client = row.record else { continue }
            guard let server else {
                failed.append(FailedRecord(recordID: row.recordID, mutationID: row.mutation?.id,
                                           error: TandemError(.notFound, "Record '\(row.recordID)' is no longer on the server: it was deleted there after the version this change was based on. Nothing was changed on this device; save it again as a new record, or delete it.")))
                continue
            }
            let conflict = RecordConflict(base: baseRecords[row.recordID], client: client, server: server)
            conflictList.append(conflict)
            let choice = delegate.map { $0.syncEngine(self, shouldResolveConflict: conflict) } ?? configuration.resolver.resolve(conflict)
            if var choice {
                choice.id = client.id
                choice.metadata.version = server.metadata.version
                resolved.append(choice)
                resolutions.append((conflict, choice))
            } else {
                // Queued again as it was: after a start, it meets the conflict again.
                unresolved.append((conflict, client))
            }
        }
        do {
            // One transaction: a conflicted change never leaves the queue without its resolution
            // in it. A record the app changed again meanwhile keeps its newer change, which meets
            // the conflict in its turn.
            let (again, requeued) = try await store.settle(account: account, settlements, undecided: undecided, requeue: resolved + unresolved.map(\.1))
            if !again.isEmpty || !requeued.isEmpty { handle(.resolved(again.map(\.change) + requeued.map(\.change), now: now), for: account) }
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now))
            return
        }
        let results = SendResults(batch: batch, saved: saved, deleted: deleted, conflicts: conflictList, failed: failed)
        emit(.sent(results)) { delegate in
            if !saved.isEmpty { delegate.syncEngine(self, didSendModifications: saved, batch: batch) }
            if !deleted.isEmpty { delegate.syncEngine(self, didSendDeletions: deleted, batch: batch) }
        }
        for (conflict, choice) in resolutions { emit(.conflictResolved(conflict, choice)) { _ in } }
        if !failed.isEmpty {
            emit(.sendFailed(batch: batch, failed)) { $0.syncEngine(self, sendDidFailFor: failed, batch: batch) }
        }
        handle(.succeeded(.sent(batch: batch), attempt: attempt, now: now))
        if let (conflict, _) = unresolved.first {
            handle(.unresolved(TandemError(.aborted, "The conflict on record '\(conflict.client.id)' (server version \(conflict.server.metadata.version)) was left unresolved; the change stays queued. Resolve it (delegate or resolver), then start the engine.")))
        }
    }

    private func fetch(after token: ChangeToken?, account: String, attempt: Int) async {
        var token = token
        let page: ChangePage
        let fromStart: Bool
        do {
            // A read from 0 that an earlier run of the engine left unfinished starts over: the
            // records it brought were not kept, so its end could not tell what is gone.
            if token != nil, core.withLock({ $0.sweep?.account != account }), try await store.isSweeping(account: account) {
                token = nil
            }
            if token == nil {
                core.withLock { core in
                    core.dropReadAhead()
                    core.sweep = Sweep(account: account)
                }
                try await store.beginSweep(account: account)
            }
            fromStart = core.withLock { $0.sweep?.account == account }
            // The page read ahead for this token, if it was; any other is of no use now.
            let ahead = core.withLock { core -> Task<ChangePage, any Error>? in
                guard let readAhead = core.readAhead, readAhead.account == account, readAhead.token == token else {
                    core.dropReadAhead()
                    return nil
                }
                core.readAhead = nil
                return readAhead.page
            }
            if let ahead {
                page = try await ahead.value
            } else {
                page = try await readPage(after: token, account: account, fromStart: fromStart)
            }
        } catch {
            handle(.failed(Self.classify(error, fetching: true), attempt: attempt, now: now))
            return
        }
        // Another user signed in meanwhile: the page is theirs to fetch again, and told to no one.
        guard isCurrent(account) else { return }
        // The feed goes on: its next page is asked for now, and comes while this one is handled
        // (it is the fetch the machine runs next, unless a send comes first).
        if page.hasMore {
            let next = ChangeToken(page.version)
            let task = Task { try await self.readPage(after: next, account: account, fromStart: fromStart) }
            core.withLock { core in
                core.dropReadAhead()
                core.readAhead = ReadAhead(account: account, token: next, page: task)
            }
        }
        var modifications: [SyncedRecord] = []
        var deletions: [RecordDeletion] = []
        var failures: [FailedRecord] = []
        // The server's state of each record, as the page carried it (its data not encoded again).
        var bases: [(id: String, version: Version, data: String?)] = []
        bases.reserveCapacity(page.changes.count)
        modifications.reserveCapacity(page.changes.count)
        var types: [String: String] = [:]
        do {
            types = try await store.baseTypes(account: account, ids: page.changes.filter { $0.document == nil }.map(\.path.id))
        } catch {
            // The deletions go on without their records' types; the app hears why.
            noteFailure(error)
        }
        for change in page.changes {
            let id = change.path.id
            guard let document = change.document else {
                deletions.append(RecordDeletion(recordID: id, recordType: types[id] ?? ""))
                bases.append((id, change.version, nil))
                continue
            }
            do {
                let record = try RecordCoding.record(id: id, fields: document.data, version: document.version, encryption: configuration.encryption)
                modifications.append(record)
                bases.append((id, document.version, change.encodedData ?? JSONText.encode(.object(document.data))))
            } catch {
                failures.append(FailedRecord(recordID: id, mutationID: nil, error: error))
            }
        }
        do {
            try await store.storeBases(account: account, bases)
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now))
            return
        }
        // Stamps seen from other devices: this one's next stamps come after them.
        let wall = configuration.wallClock()
        core.withLock { core in
            for stamp in modifications.compactMap({ $0.metadata.stamps.values.max() }) { core.clock.observe(stamp, wall: wall) }
        }
        // The end of a read from 0: what this engine knew of and the read did not bring is gone.
        if fromStart {
            let ended = core.withLock { core -> Set<String>? in
                core.sweep?.seen.formUnion(page.changes.map(\.path.id))
                guard !page.hasMore, let sweep = core.sweep, sweep.account == account else { return nil }
                core.sweep = nil
                return sweep.seen
            }
            if let seen = ended {
                do {
                    deletions += try await store.endSweep(account: account, seen: seen, through: page.version)
                } catch {
                    handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now))
                    return
                }
            }
        }
        if !deletions.isEmpty { emit(.fetchedDeletions(deletions)) { $0.syncEngine(self, didFetchDeletions: deletions) } }
        // A configured size below one (which sends take as one) must not stall this loop or trap.
        let size = max(1, configuration.maxRecordsPerBatch)
        var start = 0
        while start < modifications.count {
            let chunk = Array(modifications[start..<min(start + size, modifications.count)])
            emit(.fetchedModifications(chunk)) { $0.syncEngine(self, didFetchModifications: chunk) }
            start += chunk.count
        }
        if !failures.isEmpty { emit(.fetchFailed(failures)) { $0.syncEngine(self, fetchDidFailFor: failures) } }
        // The checkpoint only after every record before it was delivered.
        let next = ChangeToken(page.version)
        handle(.succeeded(.fetched(token: next, hasMore: page.hasMore), attempt: attempt, now: now))
        emit(.tokenUpdated(next)) { $0.syncEngine(self, didUpdateChangeToken: next) }
    }

    private func dropReadAhead() {
        core.withLock { $0.dropReadAhead() }
    }

    private func readPage(after token: ChangeToken?, account: String, fromStart: Bool) async throws -> ChangePage {
        try await client.changes(.collection(try recordsPath(account), Query()), since: token?.version ?? Version(0), limit: configuration.fetchPageSize,
                                 fromStart: fromStart)
    }

    /// How a failure is retried, split, restarted or ends the engine.
    static func classify(_ error: any Error, fetching: Bool = false) -> ChangeSyncStateMachine.Failure {
        guard let error = error as? TandemError else { return .transient(tandemError(error), retryAfter: nil) }
        switch error.code {
        case .unavailable, .aborted, .deadlineExceeded, .cancelled, .internal, .unknown:
            return .transient(error, retryAfter: error.retryAfter)
        case .resourceExhausted:
            return error.retryAfter != nil ? .rateLimited(error, retryAfter: error.retryAfter) : .tooLarge(error)
        case .outOfRange where fetching:
            return .tokenExpired
        default:
            return .fatal(error)
        }
    }

    static func tandemError(_ error: any Error) -> TandemError {
        if let error = error as? TandemError { return error }
        if let error = error as? RecordEncryptionError { return TandemError.invalidArgument(error.description) }
        return TandemError(.internal, "\(error)")
    }
}

/// A step a test runs inside ``ChangeSyncEngine/sendChanges(modify:delete:)`` (boxed: a closure kept
/// in a `Mutex` directly is thunked again on every access).
package final class QueueingHook: Sendable {
    let body: @Sendable () -> Void
    package init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}
