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
/// let results = try await engine.send(modify: [note], delete: [])   // once the server answered
/// engine.fetchChanges(token: savedState?.token)
/// ```
///
/// Threading: the engine's state has one owner, a serial queue of its own. Every change of it
/// (the app's calls, the server's answers, sign-ins, the retry clock) is a step there, one at a
/// time, and the engine's file is written there. The delegate is called there, in order, between
/// steps; a delegate may call the engine back (its synchronous calls then run at once). Reading
/// ``status``, ``state`` or ``lastError`` never waits: they are published after each step.
/// ``sendChanges(modify:delete:)-([SyncedRecord],_)`` blocks its caller until the changes are on disk (a wait for
/// the queue's turn and a flush, about a millisecond on a quiet device);
/// ``enqueue(modify:delete:)-([SyncedRecord],_)`` and ``send(modify:delete:)-([SyncedRecord],_)`` wait without holding a thread.
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
/// delegate; ``start()`` resumes it. While the client's connection is down nothing is tried and no
/// failure counted: the engine waits for the connection, and goes on at once when it is back. A token older than the server keeps is dropped
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
        /// The clock retries, backoffs and the throttle wait on (a `ManualClock` in tests).
        public var clock: any Clock<Duration> = ContinuousClock()
        /// How long a write to the engine's file waits while another connection writes it (a
        /// second engine on the same zone, another process) before it fails with "database is
        /// locked" (5 seconds by default).
        public var fileBusyTimeout: Duration = .seconds(5)

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
        /// Why the last operation failed, while no operation has succeeded since: the reason for
        /// the retries `retryCount` counts, or for the halt. Nil after a success and after `start()`.
        public var failure: TandemError?
        /// Where the last fetch ended (the token of `ChangeSyncEngine.state`).
        public var token: ChangeToken?
        /// Whether the client's connection is down, as the engine last heard: it tries nothing,
        /// and counts no failure, until the connection is back (then it goes on at once).
        public var isWaitingForConnection = false
    }

    /// The engine's state, which only steps on ``owner`` read or change.
    struct Core {
        var machine: ChangeSyncStateMachine
        var state: State
        var clock: HybridLogicalClock
        var subscription: Task<Void, Never>?
        var wake: Task<Void, Never>?
        /// The page after a page that said `hasMore`, asked for while that page is handled.
        var readAhead: ReadAhead?
        /// A read of the whole feed from version 0 under way, and the records it brought so far.
        var sweep: Sweep?
        var lastError: ErrorBox?
        var failure: TandemError?
        /// Fetches the app asked for while nobody was signed in: run when someone signs in.
        var fetchesAtSignIn: [(token: ChangeToken?, account: String?)] = []
        /// Sends the app awaits (``send(modify:delete:)-([SyncedRecord],_)``).
        var waiters = SendWaiters()
        var isShutDown = false
        /// The socket the first of the sends running now went on: the others go only on it
        /// (nil: it waited for a connection, or was not sent, and they do not go).
        var roundSocket: Int?

        /// The engine takes no more steps: what it waits for is cancelled, and the sends awaited
        /// fail with `error` (their changes stay queued in the file).
        mutating func shutDown(failing error: TandemError) {
            isShutDown = true
            subscription?.cancel()
            wake?.cancel()
            dropReadAhead()
            waiters.failAll(error)
        }

        /// Cancels the page read ahead, if any: it is of no use now.
        mutating func dropReadAhead() {
            readAhead?.page.cancel()
            readAhead = nil
        }
    }

    /// What any thread may read of the engine: published after each step that changed it.
    struct Published: Equatable, Sendable {
        var status: Status
        var state: State
        var lastError: ErrorBox?

        init(_ core: Core) {
            status = Status(account: core.machine.account, isRunning: core.machine.isRunning, isHalted: core.machine.isHalted,
                            pendingCount: core.machine.pendingCount, currentQueue: core.machine.currentQueue?.rawValue,
                            retryCount: core.machine.retryCount, failure: core.failure, token: core.state.token,
                            isWaitingForConnection: !core.machine.isConnected)
            state = core.state
            lastError = core.lastError
        }
    }

    /// An error as published: told apart by identity (errors need not be equatable).
    final class ErrorBox: Sendable, Equatable {
        let error: any Error
        init(_ error: any Error) { self.error = error }
        static func == (lhs: ErrorBox, rhs: ErrorBox) -> Bool { lhs === rhs }
    }

    /// A read of an account's whole feed from version 0 (a new device, or a token the server no
    /// longer keeps changes for): its pages continue it (`fromStart`), and once it reaches the
    /// end, a record this engine knew of that it did not bring was deleted long ago (its tombstone
    /// pruned) and is told as a deletion.
    struct Sweep {
        var account: String
        var seen: Set<String> = []
    }

    /// A page of the feed asked for before its fetch runs.
    struct ReadAhead {
        var account: String
        var token: ChangeToken
        var page: Task<ChangePage, any Error>
    }

    /// Who hears the engine: its delegate and the subscribers of its streams. Apart from the
    /// engine's state (a subscriber comes and goes from any thread).
    struct Listeners {
        weak var delegate: (any ChangeSyncEngineDelegate)?
        var events: [Int: AsyncStream<ChangeSyncEvent>.Continuation] = [:]
        var statuses: [Int: (continuation: AsyncStream<Status>.Continuation, last: Status?)] = [:]
        var signals: [Int: AsyncStream<Void>.Continuation] = [:]
        var next = 0
    }

    /// The configuration the engine was made with.
    public let configuration: Configuration
    let client: TandemClient
    let store: ChangeQueueStore
    /// The serial queue that owns the engine's state.
    let owner: EngineQueue
    let core: QueueOwned<Core, Published>
    let listeners = Mutex(Listeners())
    /// Runs inside the step that queues a change, between the file and the machine: for tests.
    package let afterQueueing = Mutex<QueueingHook?>(nil)
    /// Told each event the machine takes and the actions it answers, on the owner: for
    /// simulations that trace the engine.
    package let machineTrace = Mutex<MachineTrace?>(nil)
    let registrar = ObservationRegistrar()
    /// Time elapsed on the configured clock since the engine was made.
    let now: @Sendable () -> Duration
    /// Sleeps on the configured clock until an elapsed time.
    let sleep: @Sendable (Duration) async throws -> Void
    private let authTask = Mutex<Task<Void, Never>?>(nil)
    /// The client's connection, followed: nothing is tried while it is down (held until release).
    private let connectionObservation = Mutex<ConnectionObservation?>(nil)

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
        let path = directory.appendingPathComponent("changes-\(LocalStorageLocation.fileName(for: configuration.zoneName)).sqlite").standardizedFileURL.path
        // One live engine per zone file in this process: an older one the app still holds (a task
        // keeps it) stops here, before this one reads the queue it would otherwise go on changing.
        EngineHandover.supersede(in: "changes:\(path)")
        store = try ChangeQueueStore(path: path, busyTimeout: configuration.fileBusyTimeout)
        var limits = ChangeSyncStateMachine.Limits()
        limits.maxRetries = configuration.maxRetries
        limits.maxRecordsPerBatch = max(1, configuration.maxRecordsPerBatch)
        limits.maxBytesPerBatch = max(1, configuration.maxBytesPerBatch)
        limits.maxSendsInFlight = max(1, configuration.maxSendsInFlight)
        owner = EngineQueue(label: "tandem.changes.\(configuration.zoneName)")
        core = QueueOwned(Core(machine: ChangeSyncStateMachine(limits: limits), state: state ?? State(), clock: HybridLogicalClock(node: client.clientID)),
                          on: owner, status: Published.init)
        (now, sleep) = Self.timing(configuration.clock)
        let stream = client.authStates()
        authTask.withLock { task in
            task = Task { [weak self] in
                for await auth in stream {
                    guard let self else { return }
                    self.owner.enqueue { self.accountChanged(auth.uid) }
                }
            }
        }
        let uid = client.authState.uid
        owner.enqueue { self.accountChanged(uid) }
        let observation = client.observeConnection { [weak self] event in
            guard let self else { return }
            self.owner.enqueue { self.handle(.connection(up: event == .resumed, now: self.now())) }
        }
        connectionObservation.withLock { $0 = observation }
        EngineHandover.arrive("changes:\(path)", on: owner) { [weak self] in self?.supersede() }
    }

    /// A newer engine of this zone file was made while this one lives: this one stops at once
    /// (its answers still coming are not taken, and it sends nothing more), and its calls that
    /// queue changes fail; the changes stay queued in the file, for the newer engine.
    private func supersede() {
        owner.syncOrHere {
            step { core in
                _ = core.machine.handle(.stop)
                core.shutDown(failing: TandemError(.cancelled, "A newer engine of this zone took its file over; the changes stay queued there, and the newer engine sends them."))
            }
        }
    }

    /// Elapsed time on `clock`, and a sleep until an elapsed time on it.
    private static func timing(_ clock: some Clock<Duration>) -> (@Sendable () -> Duration, @Sendable (Duration) async throws -> Void) {
        let start = clock.now
        return ({ start.duration(to: clock.now) }, { at in try await clock.sleep(until: start.advanced(by: at), tolerance: nil) })
    }

    deinit {
        EngineHandover.gone(owner)
        authTask.withLock { $0?.cancel() }
        // The last step: after every one queued before (none of which holds the engine).
        let core = core
        owner.enqueue {
            core.access { $0.shutDown(failing: TandemError(.cancelled, "The engine was released; its changes stay queued in its file, for the next engine of this zone.")) }
        }
        listeners.withLock { listeners in
            listeners.events.values.forEach { $0.finish() }
            listeners.statuses.values.forEach { $0.continuation.finish() }
            listeners.signals.values.forEach { $0.finish() }
        }
    }

    /// Told of every result, on the engine's queue, in order; held weakly.
    public var delegate: (any ChangeSyncEngineDelegate)? {
        get { listeners.withLock { $0.delegate } }
        set { listeners.withLock { $0.delegate = newValue } }
    }

    // MARK: Observable state

    /// What the app stores (its token, its account).
    public var state: State {
        registrar.access(self, keyPath: \.state)
        return core.current.state
    }

    /// What the engine is doing now, as one value; observable. `states()` streams the same values.
    public var status: Status {
        registrar.access(self, keyPath: \.status)
        return core.current.status
    }

    /// Whether the engine was started and has neither stopped nor halted since (`status.isRunning`).
    public var isRunning: Bool { status.isRunning }
    /// Operations waiting or running, each pending record counting one (`status.pendingCount`).
    public var pendingCount: Int { status.pendingCount }
    /// Where the last fetch ended (`status.token`); nil before the first one.
    public var token: ChangeToken? { status.token }

    /// The error the engine last halted with, or the last failure it met (a retried one
    /// included: `status.failure` says whether it still stands).
    public var lastError: (any Error)? {
        registrar.access(self, keyPath: \.lastError)
        return core.current.lastError?.error
    }

    /// Every event, from now on, to this subscriber (each subscriber gets each event).
    public func events() -> AsyncStream<ChangeSyncEvent> {
        subscribe(\.events)
    }

    /// The engine's status now, then each time it changes.
    public func states() -> AsyncStream<Status> {
        let (stream, continuation) = AsyncStream.makeStream(of: Status.self)
        let token = listeners.withLock { listeners in
            listeners.next += 1
            // Read with the subscription, under the same lock the changes are told under: none
            // comes between, and one told twice is told once.
            let now = core.current.status
            continuation.yield(now)
            listeners.statuses[listeners.next] = (continuation, now)
            return listeners.next
        }
        continuation.onTermination = { [weak self] _ in _ = self?.listeners.withLock { $0.statuses.removeValue(forKey: token) } }
        return stream
    }

    /// A signal after each event and each change of status: for tests that await a state.
    package func changeSignals() -> AsyncStream<Void> {
        subscribe(\.signals)
    }

    /// A stream fed from `subscribers`, until its reader stops.
    private func subscribe<Element: Sendable>(_ subscribers: any WritableKeyPath<Listeners, [Int: AsyncStream<Element>.Continuation]> & Sendable) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let token = listeners.withLock { listeners in
            listeners.next += 1
            listeners[keyPath: subscribers][listeners.next] = continuation
            return listeners.next
        }
        continuation.onTermination = { [weak self] _ in _ = self?.listeners.withLock { $0[keyPath: subscribers].removeValue(forKey: token) } }
        return stream
    }

    /// Returns once every step queued before has run (suspending meanwhile): for tests and
    /// simulations that check the engine after the changes they caused.
    package func barrier() async {
        await owner.run {}
    }

    /// How many changes of `account` its stored queue holds (-1 when it cannot be read): for
    /// tests and simulations.
    package func storedChangeCount(account: String) -> Int {
        (try? store.pending(account: account).count) ?? -1
    }

    /// The stored queue of `account`, a line per change (row, record, sequence once sent, and the
    /// record's properties): for simulation traces.
    package func storedChanges(account: String) -> [String] {
        ((try? store.pending(account: account)) ?? []).map { row in
            "#\(row.rowID) \(row.recordID)\(row.sequence.map { " seq \($0)" } ?? "") \(row.record.map { "\($0.properties)" } ?? "deletion")"
        }
    }

    /// Runs `body` on the engine's state on its owner, after every step queued before, blocking
    /// the caller meanwhile: for tests that look inside.
    func onOwner<Result>(_ body: (inout Core) throws -> Result) rethrows -> Result {
        try owner.sync { try core.access(body) }
    }
}

/// A step a test runs inside ``ChangeSyncEngine/sendChanges(modify:delete:)-([SyncedRecord],_)`` (boxed: a closure kept
/// in a `Mutex` directly is thunked again on every access).
package final class QueueingHook: Sendable {
    let body: @Sendable () -> Void
    package init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// A hook told each event of a change-sync engine's machine and its actions (boxed: a closure kept
/// in a `Mutex` directly is thunked again on every access).
package final class MachineTrace: Sendable {
    let body: @Sendable (String) -> Void
    package init(_ body: @escaping @Sendable (String) -> Void) { self.body = body }
}
