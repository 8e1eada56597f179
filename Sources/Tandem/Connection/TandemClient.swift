import Foundation
import Logging
import Observation
import ServiceLifecycle
import Synchronization
import TandemCore

/// The connection to a Tandem server: one WebSocket to `/v1/stream`, kept up for as long as the
/// client runs.
///
/// `TandemClient` is a `Service`: its `run()` connects, says hello with a persistent client id, sends
/// heartbeats, notices a dead connection, reconnects with backoff on the configured clock, resumes
/// every listener from the last version it saw, and tells the engines bound to it to send their
/// outboxes. Reads and writes made while a connection attempt is under way wait for it; made
/// while it is disconnected otherwise, they fail at once with `unavailable` (the engines keep such
/// writes queued) and trigger an immediate reconnect attempt.
///
/// ```swift
/// let client = TandemClient(url: URL(string: "http://127.0.0.1:8080")!)
/// let todos = CollectionSyncEngine<Todo>(
///     remote: TandemRemoteCollectionService(client: client, collection: try CollectionPath("todos")),
///     managerKey: "todos")
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await client.run() }
///     await todos.startListening()
///     try await todos.saveDocument(Todo(id: "1", title: "Write the docs"))
/// }
/// ```
public final class TandemClient: Service, Sendable, Observable {
    /// The server's base URL, such as `http://127.0.0.1:8080`.
    public let url: URL
    /// The options the client was made with: its id, storage, tokens, heartbeats, reconnection,
    /// logging and metrics.
    public let configuration: TandemClientConfiguration
    /// The id this client says hello with; signed in, with a digest of the user's id after it, so
    /// each user on the device has an id of their own.
    public let clientID: String
    let streamURL: String
    /// How connections are opened: a WebSocket, unless made otherwise.
    let transport: any ClientTransport

    /// The open socket's outgoing frames.
    struct Connection {
        var attempt: Int
        var frames: AsyncStream<String>.Continuation
    }

    struct Listener {
        var target: ListenTarget
        var lastVersion: Version?
        var failWhenDisconnected: Bool
        var continuation: AsyncThrowingStream<RemoteChangeBatch, any Error>.Continuation
        /// Frames of a batch that is still arriving.
        var partial: [RemoteChange] = []
        /// Whether its listen went out on the socket in use.
        var sent = false
        /// Each frame of a batch is delivered as it comes, as a piece that `continues` (an engine
        /// prepares a large snapshot while the rest arrives). Only with `failWhenDisconnected`, so
        /// a batch cut by a disconnection ends the stream rather than starting over in it.
        var inPieces = false
        /// Told only the versions of commits in its scope, without their changes.
        var notify = false
    }

    struct State {
        /// When to connect, reconnect and send heartbeats.
        var machine: ConnectionStateMachine
        /// Where the machine's connects and sleeps go, for `run()`; nil once stopped.
        var commands: AsyncStream<ConnectionCommand>.Continuation?
        /// Whether `run()` was called.
        var running = false
        /// The open socket (welcomed or not).
        var connection: Connection?
        /// The hello of the attempt under way, with the token the provider gave for it.
        var hello: String
        var nextRequestID = 1
        var pending: [Int: PendingReply] = [:]
        var listeners: [Int: Listener] = [:]
        /// The sleep between attempts, to end early.
        var wake: CheckedContinuation<Void, Never>?
        /// Requests made while an attempt was under way, sent once it is welcomed, with the user
        /// signed in when they were made: one made for a user is never sent on a connection
        /// welcomed as someone else (it fails, to be sent again by its owner).
        /// Requests made while connecting, sent after the welcome: each with the user it was made
        /// for, and whether it must go as that user only (else it goes as anyone unless made for
        /// a signed-in user and another was welcomed).
        /// A write (`ordered`) never overtakes a request sent before it: when the socket fails
        /// with requests sent on it, the writes waiting for the next one fail too.
        var deferred: [(id: Int, frame: String, user: String?, strict: Bool, ordered: Bool)] = []
        var connectedWaiters: [CheckedContinuation<Void, Never>] = []
        /// Who hears of the connection going and coming back, by token.
        var connectionObservers: [Int: ConnectionObserver] = [:]
        var nextConnectionObserver = 0
        /// The last connection event told, so observers hear each change once. A client counts as
        /// disconnected until its first connection: an engine made before it hears `resumed` then.
        var reported: ConnectionEvent = .disconnected
        /// Who the server welcomed, and who hears of it changing, by token.
        var authState = AuthState.signedOut
        var authObservers: [Int: AuthObserver] = [:]
        /// Connection and auth events not told yet, in order, and whether someone is telling them:
        /// one teller at a time, so every observer hears them in the order they happened.
        var events: [Notice] = []
        var tellingEvents = false
        /// Fault injection: acknowledgements to let through before one is dropped with the connection.
        var acknowledgementsBeforeDrop: Int?
        var connectionAttempts = 0

        /// The socket in use when the server has said welcome on it: requests may go.
        var welcomed: Connection? { machine.isConnected ? connection : nil }
    }

    /// A connection or auth event, with the observers to tell.
    enum Notice {
        case connection(ConnectionEvent, [ConnectionObserver])
        case auth(AuthState, [AuthObserver])
    }

    let state: Mutex<State>
    /// Where the token sent with each hello comes from; nil without credentials.
    let tokenSource: TokenSource?
    /// The connects and sleeps the machine asks for, carried out by `run()`.
    let commands: AsyncStream<ConnectionCommand>
    /// Time elapsed on the configured clock: the machine's deadlines.
    let elapsed: @Sendable () -> Duration
    /// The reconnect delays' jitter.
    let randomness: RetryRandomness
    /// Tells observers of ``status`` (SwiftUI, `withObservationTracking`) when it changes.
    let registrar = ObservationRegistrar()

    /// - Parameters:
    ///   - url: the server's base URL (`http://` or `ws://`, with host and port).
    ///   - configuration: the client id, storage, tokens, heartbeats, reconnection and metrics.
    public convenience init(url: URL, configuration: TandemClientConfiguration = TandemClientConfiguration()) {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false) ?? URLComponents()
        components.scheme = (components.scheme == "https" || components.scheme == "wss") ? "wss" : "ws"
        let base = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = base + "/v1/stream"
        let endpoint = components.string ?? "ws://127.0.0.1:8080/v1/stream"
        let tls = components.scheme == "wss" ? configuration.tlsConfiguration ?? .makeClientConfiguration() : nil
        if tls != nil, let host = components.host, host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) {
            configuration.logger.error("TLS checks the server by host name, and \(host) is an IP address: connections to \(url.absoluteString) will fail. Use the name its certificate holds.")
        }
        self.init(url: url, transport: WebSocketTransport(endpoint: endpoint, maximumMessageBytes: configuration.maximumMessageBytes, tls: tls, logger: configuration.logger),
                  configuration: configuration)
    }

    /// A client over any transport (a server in this process, in `TandemTesting`); `url` names it
    /// in errors.
    package init(url: URL, transport: any ClientTransport, configuration: TandemClientConfiguration = TandemClientConfiguration()) {
        self.url = url
        self.transport = transport
        self.configuration = configuration
        clientID = configuration.clientID ?? ClientIdentity.load(from: configuration.storageDirectory, logger: configuration.logger)
        streamURL = transport.endpoint
        if let provider = configuration.tokenProvider {
            tokenSource = TokenSource(provider)
        } else if let token = configuration.token {
            tokenSource = TokenSource { token }
        } else {
            tokenSource = nil
        }
        let (commands, queue) = AsyncStream.makeStream(of: ConnectionCommand.self)
        self.commands = commands
        var initial = State(
            machine: ConnectionStateMachine(policy: configuration.reconnectPolicy, missedHeartbeatsAllowed: configuration.missedHeartbeatsAllowed),
            hello: ClientMessage.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: nil).text)
        initial.commands = queue
        state = Mutex(initial)
        elapsed = Self.stopwatch(configuration.clock)
        randomness = RetryRandomness(configuration.random)
    }

    private static func stopwatch(_ clock: some Clock<Duration>) -> @Sendable () -> Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }

    // MARK: Status

    /// Where the connection is, and who is signed in, in one value a view can show without
    /// callbacks: observable, it changes as the connection goes and comes back and as users sign
    /// in and out (announced on the thread that learnt it).
    public var status: ClientStatus {
        registrar.access(self, keyPath: \.status)
        return state.withLock { state in
            let connection: ClientStatus.Connection = state.machine.isConnected ? .connected : state.machine.wantsConnection ? .connecting : .offline
            return ClientStatus(connection: connection, auth: state.authState)
        }
    }

    /// Whether the client is connected and the server has said welcome.
    public var isConnected: Bool { state.withLock { $0.machine.isConnected } }

    /// How many times the client has tried to connect.
    public var connectionAttempts: Int { state.withLock { $0.connectionAttempts } }

    /// Returns once the client is connected (at once if it is), or once it has stopped for good.
    public func waitUntilConnected() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.machine.isConnected || state.machine.isStopped { return true }
                state.connectedWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Takes the client offline (closing the connection, and not reconnecting) or back online.
    /// Engines bound to it keep working from their caches and queue their writes meanwhile.
    public func setOnline(_ online: Bool) {
        connectionEvent { $0.setOnline(online) }
    }

    /// Fault injection for tests: the next acknowledgement the server sends is discarded and the
    /// connection dropped, as if the network failed after the commit and before the answer.
    @_spi(Testing) public func dropNextAcknowledgement() {
        dropConnection(afterAcknowledgements: 0)
    }

    /// Fault injection for tests: after `count` more acknowledgements, the next one is discarded
    /// and the connection dropped. Writes sent after it may have been applied too, unanswered.
    @_spi(Testing) public func dropConnection(afterAcknowledgements count: Int) {
        state.withLock { $0.acknowledgementsBeforeDrop = count }
    }

    /// Calls `handler` each time the connection goes (`disconnected`) and comes back (`resumed`),
    /// until the observation is cancelled or freed; `disconnected` at once when the connection is
    /// down now. Engines bound to the client follow it instead of retrying on their own.
    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation {
        let observer = ConnectionObserver(handler)
        let (token, tell) = state.withLock { state -> (Int, Bool) in
            state.nextConnectionObserver += 1
            state.connectionObservers[state.nextConnectionObserver] = observer
            guard state.reported == .disconnected else { return (state.nextConnectionObserver, false) }
            return (state.nextConnectionObserver, Self.queue(.connection(.disconnected, [observer]), in: &state))
        }
        if tell { tellConnectionEvents() }
        return ConnectionObservation { [weak self] in
            _ = self?.state.withLock { $0.connectionObservers.removeValue(forKey: token) }
        }
    }

    /// How many connection observers are registered (engines bound to the client hold one each).
    package var connectionObserverCount: Int { state.withLock { $0.connectionObservers.count } }

    // MARK: Requests

    /// Reads one document, or nil.
    public func document(at path: DocumentPath) async throws -> Document? {
        guard case .documents(_, let documents, _) = try await request({ .get(id: $0, path: path) }) else {
            throw TandemError(.internal, "The server answered a get with the wrong message.")
        }
        return documents.first
    }

    /// Runs a query (or reads a document) once.
    public func documents(_ target: ListenTarget) async throws -> [Document] {
        guard case .documents(_, let documents, _) = try await request({ .query(id: $0, target: target) }) else {
            throw TandemError(.internal, "The server answered a query with the wrong message.")
        }
        return documents
    }

    /// One page of `target`'s change feed: every change after `since` (a version, 0 for all),
    /// at most about `limit` of them (a commit is never cut in two), oldest first. The page's
    /// `version` is the `since` of the next; `hasMore` says whether one follows. A `since` of 0 is
    /// always served, however long ago the server pruned deletions, and so are the pages after it
    /// when they say `fromStart` (the caller holds only what the read's pages gave it); any other
    /// `since` older than the server keeps deletions for (or beyond its newest version) throws
    /// `out-of-range`: start again from 0.
    ///
    /// ```swift
    /// var since = Version(0)
    /// while true {
    ///     let page = try await client.changes(.collection(try CollectionPath("notes"), Query()), since: since, fromStart: true)
    ///     apply(page.changes)
    ///     since = page.version
    ///     if !page.hasMore { break }
    /// }
    /// ```
    public func changes(_ target: ListenTarget, since: Version, limit: Int = 1_000, fromStart: Bool = false) async throws -> ChangePage {
        guard limit > 0 else { throw TandemError.invalidArgument("A fetch's limit is more than 0 (it is \(limit)).") }
        guard case .page(_, let page) = try await request({ .fetch(id: $0, target: target, since: since, limit: limit, fromStart: fromStart) }) else {
            throw TandemError(.internal, "The server answered a fetch with the wrong message.")
        }
        return page
    }

    /// Commits mutations atomically; each is applied at most once by its `MutationID`.
    ///
    /// Returns one acknowledgement per mutation, each `applied`, `replayed` (applied before, by a
    /// request with the same id: the first answer) or `unknown` (decided too long ago for the server
    /// to know the answer: read the document). Throws the error when the write was refused, and
    /// `unavailable` or `aborted` when it was not applied and may be sent again.
    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] {
        try await commit(requests: [WriteRequest(mutations)])[0].get()
    }

    /// Commits the mutations built in `build` atomically, as ``commit(_:)-([Mutation])`` does.
    @discardableResult
    public func commit(batch build: (inout MutationBatch) throws -> Void) async throws -> [WriteAcknowledgement] {
        var batch = MutationBatch()
        try build(&batch)
        return try await commit(batch.mutations)
    }

    /// Sends several write requests at once, in order, without waiting for one answer before
    /// sending the next, and returns each one's answer. The server applies them in the order sent;
    /// when one fails for a passing reason (`unavailable`), the later ones fail with `aborted`
    /// rather than apply ahead of it.
    ///
    /// An atomic request answers as ``commit(_:)-([Mutation])`` does (refused: its error). A
    /// request that is not atomic answers with each mutation's acknowledgement, `refused` ones
    /// included, or fails whole (with nothing to assume about which of its writes applied: send it
    /// again, and those are answered `replayed`).
    ///
    /// A request the server refuses over a rate (`resource-exhausted` with `retryAfter`) is sent
    /// again, with the ones behind it it held back (`aborted`), once the wait has passed on the
    /// configured clock; up to ``rateLimitRetries`` times, then its error is the answer.
    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        var answers = await sendOnce(requests)
        for _ in 0..<Self.rateLimitRetries {
            guard let first = answers.firstIndex(where: { Self.retryAfter($0) != nil }), let wait = Self.retryAfter(answers[first]) else { break }
            do {
                try await configuration.clock.sleep(for: wait)
            } catch {
                break
            }
            let again = (first..<answers.count).filter { index in
                guard case .failure(let error as TandemError) = answers[index] else { return false }
                return error.retryAfter != nil || error.code == .aborted
            }
            for (index, answer) in zip(again, await sendOnce(again.map { requests[$0] })) { answers[index] = answer }
        }
        return answers
    }

    /// How many times a request refused over a rate is sent again before its error is returned.
    public static let rateLimitRetries = 16

    /// The wait a failed answer asks for, when it was refused over a rate.
    static func retryAfter<Success>(_ answer: Result<Success, any Error>) -> Duration? {
        guard case .failure(let error as TandemError) = answer else { return nil }
        return error.retryAfter
    }

    private func sendOnce(_ requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        guard !requests.isEmpty else { return [] }
        return await startWrites(requests).answers()
    }

    /// A write's answer: its acknowledgements, or why it was not applied. An atomic write with a
    /// refused mutation fails with that mutation's error.
    static func acknowledgements(of answer: Result<ServerMessage, any Error>, atomic: Bool) -> Result<[WriteAcknowledgement], any Error> {
        switch answer {
        case .failure(let error):
            return .failure(error)
        case .success(.error(_, let error)):
            return .failure(error)
        case .success(.ack(_, let acknowledgements)):
            if atomic, let refused = acknowledgements.first(where: { $0.status == .refused }) {
                return .failure(refused.error ?? TandemError(.unknown, "The server refused the write without saying why."))
            }
            return .success(acknowledgements)
        case .success:
            return .failure(TandemError(.internal, "The server answered a write with the wrong message."))
        }
    }

    private var notConnected: TandemError {
        TandemError(.unavailable, "Not connected to the Tandem server at \(url.absoluteString); retrying in the background.")
    }

    /// Sends a request and waits for its answer; an error frame answering it is thrown. Refused
    /// over a rate, it is sent again once the wait has passed (see ``commit(requests:)``).
    func request(_ make: @escaping (Int) -> ClientMessage) async throws -> ServerMessage {
        var retries = 0
        while true {
            let answer = try await send([make])[0].get()
            guard case .error(_, let error) = answer else { return answer }
            guard let wait = error.retryAfter, retries < Self.rateLimitRetries else { throw error }
            retries += 1
            try await configuration.clock.sleep(for: wait)
        }
    }

    /// Sends requests in one locked step, so they go out in this order with nothing between them,
    /// and waits for every answer. While a connection attempt is under way they wait for it (and
    /// fail with it); otherwise, not connected: one `unavailable` failure.
    func send(_ requests: [(Int) -> ClientMessage]) async -> [Result<ServerMessage, any Error>] {
        guard !requests.isEmpty else { return [] }
        return await enqueue(requests).answers()
    }

    /// Queues requests on the connection now, behind every request queued before (or, while
    /// connecting, to go after the welcome); their answers come to the collector returned. Not
    /// connected and not connecting, each fails at once.
    func enqueue(_ requests: [(Int) -> ClientMessage], madeFor: [String??] = [], ordered: Bool = false, onlyOn socket: Int? = nil) -> ReplyCollector {
        let collector = ReplyCollector(count: requests.count)
        var refused: [(slot: Int, error: TandemError)] = []
        let (sent, wake) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            let connection = state.welcomed
            if let socket, connection?.attempt != socket {
                // Asked to go right behind requests sent on a socket that is gone: not sent.
                return (false, nil)
            }
            guard connection != nil || state.machine.isConnecting else {
                return (false, Self.requestWake(&state))
            }
            // Writes remember their socket, for those started behind them (``startWrites(_:onlyOn:)``).
            if ordered, let connection { collector.sentOn(connection.attempt) }
            for (slot, make) in requests.enumerated() {
                let user = slot < madeFor.count ? madeFor[slot] : nil
                if connection != nil, let user, user != state.authState.uid {
                    // Made for another user than the one this connection is signed in as: never
                    // sent as them.
                    refused.append((slot, Self.madeForAnother(user, signedIn: state.authState.uid)))
                    continue
                }
                let id = state.nextRequestID
                state.nextRequestID += 1
                state.pending[id] = PendingReply(collector: collector, slot: slot)
                let frame = make(id).text
                if let connection {
                    connection.frames.yield(frame)
                } else {
                    // Sent after the welcome, or failed with the attempt (with every pending reply).
                    state.deferred.append((id, frame, user ?? state.authState.uid, user != nil, ordered))
                }
            }
            return (true, nil)
        }
        wake?.resume()
        if !sent {
            for slot in requests.indices { collector.fill(slot, with: .failure(notConnected)) }
        }
        for (slot, error) in refused { collector.fill(slot, with: .failure(error)) }
        return collector
    }

    /// Why a request made for `user` is not sent while `signedIn` is: it passes (the sender keeps
    /// it, and sends it again once that user is back).
    static func madeForAnother(_ user: String?, signedIn: String?) -> TandemError {
        TandemError(.unavailable, "This write was made for \(user.map { "user \($0)" } ?? "the signed-out user"), and the client is signed in as \(signedIn ?? "nobody") now: it was not sent, and stays queued for its user.")
    }

    /// Write requests sent by ``startWrites(_:onlyOn:)``, whose answers are awaited later.
    package struct PendingWrites: Sendable {
        let collector: ReplyCollector
        let atomic: [Bool]

        /// The socket (connection attempt) they were put on when they were started; nil when they
        /// waited for a connection under way, or were not sent.
        package var socket: Int? { collector.socket }

        /// Each request's acknowledgements, or why it was not applied (as ``commit(requests:)``
        /// answers, without its waits and sends again after a rate limit: those are the caller's).
        package func answers() async -> [Result<[WriteAcknowledgement], any Error>] {
            zip(await collector.answers(), atomic).map { TandemClient.acknowledgements(of: $0, atomic: $1) }
        }

        /// As ``answers()``, with an atomic request's refusal as its acknowledgements (each
        /// mutation's), not as the error of the one that was refused.
        package func acknowledgements() async -> [Result<[WriteAcknowledgement], any Error>] {
            await collector.answers().map { TandemClient.acknowledgements(of: $0, atomic: false) }
        }
    }

    /// Sends write requests now, in order behind every request sent before, without waiting for
    /// their answers: a caller that must put several on the wire in a given order (each with
    /// sequences after the last) starts them one after another, then awaits each.
    ///
    /// With `socket` (the ``PendingWrites/socket`` of writes started before), they go only on that
    /// socket, right behind those: if it is gone (or not welcomed yet) they fail at once, unsent,
    /// and can never reach the server ahead of the earlier ones.
    package func startWrites(_ requests: [WriteRequest], onlyOn socket: Int? = nil) -> PendingWrites {
        let collector = enqueue(requests.map { request -> (Int) -> ClientMessage in
            request.isOneWrite
                ? { .write(id: $0, mutations: request.mutations, brief: request.isBrief) }
                : { .writeEach(id: $0, mutations: request.mutations, brief: request.isBrief) }
        }, madeFor: requests.map(\.madeFor), ordered: true, onlyOn: socket)
        return PendingWrites(collector: collector, atomic: requests.map(\.isOneWrite))
    }

    /// Asks the connection loop to try now, if it is waiting out a backoff (an engine's write made
    /// while the connection is down).
    package func wakeConnection() {
        state.withLock { Self.requestWake(&$0) }?.resume()
    }

    /// Asks the connection loop to try now, if it is waiting out a backoff; returns the sleep to end.
    static func requestWake(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        guard state.machine.wake() == [.endSleep] else { return nil }
        defer { state.wake = nil }
        return state.wake
    }
}

/// Where the answer to one request goes: a slot of the requests sent together with it.
struct PendingReply: Sendable {
    let collector: ReplyCollector
    let slot: Int

    func resume(_ answer: Result<ServerMessage, any Error>) { collector.fill(slot, with: answer) }
}

/// Gathers the answers to requests sent together and hands them over once every one is in (to
/// the waiter, or to the one who waits later).
final class ReplyCollector: Sendable {
    private struct State {
        var answers: [Result<ServerMessage, any Error>?]
        var remaining: Int
        var continuation: CheckedContinuation<[Result<ServerMessage, any Error>], Never>?
        var socket: Int?
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(answers: Array(repeating: nil, count: count), remaining: count))
    }

    /// They were put on the socket of connection attempt `attempt`, when they were made.
    func sentOn(_ attempt: Int) { state.withLock { $0.socket = attempt } }

    /// The socket they were put on when they were made, if they were.
    var socket: Int? { state.withLock { $0.socket } }

    /// Records one answer; the last one hands them all over.
    func fill(_ slot: Int, with answer: Result<ServerMessage, any Error>) {
        let done = state.withLock { state -> (CheckedContinuation<[Result<ServerMessage, any Error>], Never>, [Result<ServerMessage, any Error>])? in
            guard state.answers[slot] == nil else { return nil }
            state.answers[slot] = answer
            state.remaining -= 1
            guard state.remaining == 0, let continuation = state.continuation else { return nil }
            state.continuation = nil
            return (continuation, Self.complete(state.answers))
        }
        if let (continuation, answers) = done { continuation.resume(returning: answers) }
    }

    /// Every answer, once all are in. One waiter.
    func answers() async -> [Result<ServerMessage, any Error>] {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> [Result<ServerMessage, any Error>]? in
                guard state.remaining > 0 else { return Self.complete(state.answers) }
                state.continuation = continuation
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }

    private static func complete(_ answers: [Result<ServerMessage, any Error>?]) -> [Result<ServerMessage, any Error>] {
        answers.map { $0 ?? .failure(TandemError(.internal, "no answer")) }
    }
}

/// An observer's handler, in a class box (a closure kept directly in the state's `Mutex` would be
/// re-wrapped in a thunk on every access).
final class Observer<Event: Sendable>: Sendable {
    let call: @Sendable (Event) -> Void
    init(_ call: @escaping @Sendable (Event) -> Void) { self.call = call }
}

typealias ConnectionObserver = Observer<ConnectionEvent>
typealias AuthObserver = Observer<AuthState>
