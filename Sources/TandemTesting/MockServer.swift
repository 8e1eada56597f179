import Foundation
import Synchronization
import Tandem
import TandemCore
import TandemServer

/// A Tandem server in memory for previews and tests, with the real semantics, and a client
/// connected to it in process: the mock remotes are thin wrappers over that client. The store is a
/// `MemoryServerStore` (versions per commit, exactly-once by `MutationID`, resume from a
/// version), behind the server's real sessions and fan-out. Faults are injected in the connection,
/// where a network would cause them.
///
/// ```swift
/// let server = MockServer()
/// server.failNextCalls(2)              // the next two requests are answered `unavailable`
/// server.dropNextAcknowledgements(1)   // the next write applies, then its answer is lost with the connection
/// server.goOffline()                   // the client is cut off until goOnline()
/// ```
///
/// For an app that signs in, ``signedIn(as:rules:documents:clock:)`` makes the same mock with
/// users: the server checks tokens and access rules, and the client signs in with tokens the mock
/// mints for whoever ``signIn(as:)`` names.
///
/// ```swift
/// let server = try await MockServer.signedIn(as: "ada")   // rules: each user owns users/{uid}
/// try await server.signIn(as: "bob")                       // the client switches user
/// try await server.signOut()
/// ```
public final class MockServer: Sendable {
    /// The store behind the server.
    public let memoryStore: MemoryServerStore<ContinuousClock>
    /// The server, for more connections (`TandemClient.inProcess(mock.server)`).
    public let server: InProcessServer
    /// The client the mock remotes share, running from the start.
    public let client: TandemClient
    let faults: Locked<ConnectionFaults>
    private let listeners: Locked<Int>
    private let running: Task<Void, any Error>
    /// The users: who the client signs in as, and the keys of their tokens (nil: a server without
    /// access control, where every caller is anonymous).
    private let accounts: MockAccounts?

    /// - Parameters:
    ///   - documents: the documents the server starts with, committed together (version 1).
    ///   - clock: the clock latency is waited on.
    public convenience init(documents: [Document] = [], clock: any Clock<Duration> = ContinuousClock()) {
        self.init(documents: documents, clock: clock, accounts: nil)
    }

    /// A mock with users: the server verifies tokens and checks `rules`, and the client signs in
    /// as `uid` (nil: signed out) with a token the mock mints. ``signIn(as:)`` and ``signOut()``
    /// switch the user later. Returns once the client is connected as `uid` (or signed out).
    ///
    /// - Parameters:
    ///   - uid: the user the client signs in as first; nil starts signed out.
    ///   - rules: what each user may read and write; by default each reaches `users/{uid}` and below.
    ///   - documents: the documents the server starts with, committed together (version 1)
    ///     whatever the rules say.
    ///   - clock: the clock latency is waited on.
    public static func signedIn(as uid: String?, rules: AccessRules = .ownDocuments, documents: [Document] = [],
                                clock: any Clock<Duration> = ContinuousClock()) async throws -> MockServer {
        let accounts = MockAccounts(user: uid, tokens: try await BearerTokens(secret: "mock-\(UUID().uuidString)"), rules: rules)
        let server = MockServer(documents: documents, clock: clock, accounts: accounts)
        await server.client.waitUntilConnected()
        await server.untilSignedIn(uid)
        return server
    }

    private init(documents: [Document], clock: any Clock<Duration>, accounts: MockAccounts?) {
        self.accounts = accounts
        var configuration = SyncServerConfiguration()
        if let accounts { configuration.access = AccessControl(tokens: accounts.tokens, rules: accounts.rules) }
        configuration.logger.logLevel = .critical
        configuration.limits.maximumWritesPerSecond = .max
        configuration.limits.maximumPendingWritesPerConnection = .max
        configuration.limits.maximumReadsInFlightPerConnection = .max
        let listeners = Locked(0)
        configuration.onListenerCountChange = { count in listeners.value = count }
        self.listeners = listeners
        memoryStore = MemoryServerStore()
        if !documents.isEmpty {
            var limits = ServerLimits()
            limits.maximumBatchWrites = documents.count
            limits.maximumRequestBytes = .max
            _ = memoryStore.commitNow([documents.map { .set($0.path, $0.data) }], limits: limits)
        }
        server = InProcessServer(store: memoryStore, configuration: configuration)
        faults = Locked(ConnectionFaults())
        var clientConfiguration = TandemClientConfiguration()
        clientConfiguration.clientID = "mock-\(UUID().uuidString.lowercased())"
        clientConfiguration.logger.logLevel = .critical
        if let accounts { clientConfiguration.tokenProvider = accounts.provide }
        let client = TandemClient(url: URL(string: "tandem-mock://server")!,
                                  transport: FaultyTransport(server: server, faults: faults, clock: clock, failCommit: { [memoryStore] error in memoryStore.failNextCommits(1, with: error) }),
                                  configuration: clientConfiguration)
        self.client = client
        // Connecting from here on: the mocks' first calls wait for the connection, as they
        // would for a server that is up.
        client.startConnecting()
        running = Task { try await client.run() }
    }

    deinit {
        running.cancel()
        server.stop()
    }

    // MARK: Signing in

    /// The user the client signs in as now (nil: signed out, or a mock without users).
    public var user: String? { accounts?.user.withLock { $0 } }

    /// Signs the client in as `uid` (switching user when another is signed in), and returns once
    /// the server accepted it: engines bound to the client follow. Throws for a mock made without
    /// users (``signedIn(as:rules:documents:clock:)`` makes one with).
    public func signIn(as uid: String) async throws {
        try await switchUser(to: uid)
    }

    /// Signs the client out, and returns once it is connected anonymously.
    public func signOut() async throws {
        try await switchUser(to: nil)
    }

    /// A token of user `uid` that this mock's server accepts, for a client of your own
    /// (`TandemClient.inProcess(mock.server)` with a token provider).
    public func token(for uid: String, claims: JSONObject = [:], lifetime: Duration = .seconds(3600)) throws -> String {
        guard let accounts else { throw Self.noAccounts }
        return try accounts.tokens.mint(subject: uid, lifetime: lifetime, claims: claims)
    }

    private static let noAccounts = TandemError(.failedPrecondition, "This mock server was made without users: make it with MockServer.signedIn(as:) to sign in.")

    private func switchUser(to uid: String?) async throws {
        guard let accounts else { throw Self.noAccounts }
        let asked = accounts.asked.value
        try requestUser(uid)
        // The client asked for a token after the switch (an earlier attempt's answer does not
        // count), then connected with it.
        _ = await accounts.asked.wait(until: { $0 > asked })
        await client.waitUntilConnected()
        await untilSignedIn(uid)
    }

    /// Starts switching the client to `uid` (nil: signed out) and returns at once: the client
    /// asks for a token again and reconnects with it, and engines follow when it is accepted.
    package func requestUser(_ uid: String?) throws {
        guard let accounts else { throw Self.noAccounts }
        accounts.user.withLock { $0 = uid }
        client.refreshToken()
    }

    /// Returns once the client's auth state is `uid`'s (signed out for nil).
    private func untilSignedIn(_ uid: String?) async {
        for await state in client.authStates() where state.uid == uid { return }
    }

    // MARK: Fault injection

    /// The next `count` requests (reads, listens, writes) are answered with `error` instead of
    /// reaching the server. A write reaches the server and fails there, as one its database could
    /// not commit (`MemoryServerStore.failNextCommits(_:with:)`): a client that sent later writes
    /// without waiting sees the server hold them back behind it (`aborted`), as a real server does,
    /// instead of applying them ahead of it.
    public func failNextCalls(_ count: Int, with error: TandemError = TandemError(.unavailable, "The mock server failed this call on purpose.")) {
        faults.withLock {
            $0.failuresLeft = count
            $0.failure = error
        }
    }

    /// The next `count` write requests fail with `error` at the server, as writes its database
    /// could not commit (see ``failNextCalls(_:with:)``); reads and listens go through.
    public func failNextWrites(_ count: Int, with error: TandemError = TandemError(.unavailable, "The mock server failed this write on purpose.")) {
        faults.withLock {
            $0.writeFailuresLeft = count
            $0.writeFailure = error
        }
    }

    /// Cuts the client off, as a lost network: requests fail with `unavailable` at once and live
    /// listeners end with it, until ``goOnline()``.
    public func goOffline() {
        client.setOnline(false)
    }

    /// Reconnects the client at once; its listeners resume and the engines send their outboxes.
    public func goOnline() {
        client.setOnline(true)
    }

    /// The next `count` writes apply on the server, but their acknowledgements are lost with the
    /// connection, as when a network drops after the commit: the client reconnects at once, and the
    /// engines send them again (answered `replayed`).
    public func dropNextAcknowledgements(_ count: Int) {
        faults.withLock { $0.acknowledgementsToDrop = count }
    }

    /// A delay before each message from the server, waited on the mock's clock.
    public func setLatency(_ duration: Duration) {
        faults.withLock { $0.latency = duration }
    }

    // MARK: Inspection

    /// The live documents, by path.
    public var documents: [DocumentPath: Document] { memoryStore.documents }
    /// The newest version.
    public var version: Version { memoryStore.version }
    /// How many write requests reached the server.
    public var commitCount: Int { faults.value.commitCount }
    /// How many writes the server applied (replays excluded).
    public var appliedWriteCount: Int { faults.value.appliedCount }
    /// How many listeners the server runs.
    public var listenerCount: Int { listeners.value }

    /// Returns once the server runs exactly `count` listeners (a stopped listener leaves when the
    /// server has read its `unlisten`); false if the test's time limit cancels the wait first.
    @discardableResult
    public func waitForListeners(count: Int) async -> Bool {
        await listeners.wait { $0 == count }
    }

    /// Returns once every listen asked for so far has its first answer (or was stopped): what a
    /// test awaits before counting listeners.
    public func settle() async {
        await faults.wait { $0.waitingListens.isEmpty }
    }

    // MARK: Writes as another client

    /// Commits mutations as another client would (no mutation ids needed); returns the
    /// acknowledgements, or throws the refusal.
    @discardableResult
    public func commit(_ mutations: [Mutation]) throws -> [WriteAcknowledgement] {
        try memoryStore.commitNow([mutations])[0].get().acknowledgements
    }

    /// Writes a document as another client would.
    public func simulateWrite(_ document: Document) {
        _ = memoryStore.commitNow([[.set(document.path, document.data)]])
    }

    /// Deletes a document as another client would.
    public func simulateDelete(_ path: DocumentPath) {
        _ = memoryStore.commitNow([[.delete(path)]])
    }
}

/// What the mock's connection does to the messages it carries, and what it counted.
struct ConnectionFaults: Sendable {
    var failuresLeft = 0
    var failure = TandemError(.unavailable, "The mock server failed this call on purpose.")
    var writeFailuresLeft = 0
    var writeFailure = TandemError(.unavailable, "The mock server failed this write on purpose.")
    var acknowledgementsToDrop = 0
    var latency: Duration = .zero
    var commitCount = 0
    var appliedCount = 0
    /// Listens sent on the open connection and not answered yet, by request id.
    var waitingListens: Set<Int> = []
}

/// Connections to an ``InProcessServer`` with the mock's faults injected on the way.
struct FaultyTransport: ClientTransport {
    let server: InProcessServer
    let faults: Locked<ConnectionFaults>
    let clock: any Clock<Duration>
    /// Makes the store fail its next commit with the error: how a write fails on purpose.
    let failCommit: @Sendable (TandemError) -> Void

    var endpoint: String { "tandem-mock://server" }

    func connect(_ session: @escaping @Sendable (TransportConnection) async -> Void) async throws {
        let connection = server.connect()
        let (toClient, deliver) = AsyncStream.makeStream(of: String.self)
        // The server's messages, through the faults; injected answers join them.
        let pump = Task { [faults, clock] in
            for await text in connection.messages {
                let latency = faults.value.latency
                if latency > .zero {
                    do {
                        try await clock.sleep(for: latency)
                    } catch {
                        break
                    }
                }
                if Self.receive(text, faults: faults) {
                    deliver.yield(text)
                } else {
                    // An acknowledgement lost with the connection.
                    connection.close()
                    break
                }
            }
            deliver.finish()
        }
        let iterator = IteratorBox(toClient.makeAsyncIterator())
        let messages = AsyncThrowingStream<TransportMessage, any Error>(unfolding: {
            try await iterator.next().map { .text($0) }
        })
        let send: @Sendable (String) async throws -> Void = { [faults, failCommit] text in
            switch Self.send(text, faults: faults) {
            case .pass:
                connection.send(text)
            case .answer(let answer):
                deliver.yield(answer)
            case .failAtTheStore(let error):
                failCommit(error)
                connection.send(text)
            }
        }
        await session(TransportConnection(messages: messages, send: send, close: { connection.close() }))
        connection.close()
        pump.cancel()
        faults.withLock { $0.waitingListens = [] }
    }

    /// What becomes of a message on its way to the server.
    private enum Passage {
        /// It goes through.
        case pass
        /// This answer replaces it.
        case answer(String)
        /// It goes through, and the store fails its commit with this error.
        case failAtTheStore(TandemError)
    }

    /// A message on its way to the server. Only its envelope is read: the server parses the
    /// message itself.
    private static func send(_ text: String, faults: Locked<ConnectionFaults>) -> Passage {
        guard let envelope = WireEnvelope(text), let type = envelope.type else { return .pass }
        return faults.withLock { faults -> Passage in
            switch (type, envelope.id) {
            case ("listen", let id?), ("get", let id?), ("query", let id?), ("write", let id?):
                if faults.failuresLeft > 0 {
                    faults.failuresLeft -= 1
                    if type == "write" { return .failAtTheStore(faults.failure) }
                    return .answer(JSONText.encode(ServerMessage.error(id: id, faults.failure).wireValue))
                }
                if type == "write", faults.writeFailuresLeft > 0 {
                    faults.writeFailuresLeft -= 1
                    return .failAtTheStore(faults.writeFailure)
                }
                if type == "listen" { faults.waitingListens.insert(id) }
                if type == "write" { faults.commitCount += 1 }
            case ("unlisten", let id?):
                faults.waitingListens.remove(id)
            default:
                break
            }
            return .pass
        }
    }

    /// A message on its way to the client: false when it is an acknowledgement to lose. Only an
    /// acknowledgement (small) is parsed whole; of a batch, only its envelope is read.
    private static func receive(_ text: String, faults: Locked<ConnectionFaults>) -> Bool {
        guard let envelope = WireEnvelope(text) else { return true }
        var applied = 0
        if envelope.type == "ack" {
            guard case .ack(_, let acknowledgements)? = try? ServerMessage.parse(text) else { return true }
            applied = acknowledgements.filter { $0.status == .applied }.count
        }
        return faults.withLock { faults -> Bool in
            switch envelope.type {
            case "ack":
                faults.appliedCount += applied
                if faults.acknowledgementsToDrop > 0 {
                    faults.acknowledgementsToDrop -= 1
                    return false
                }
            case "snapshot", "changes":
                if let target = envelope.target { faults.waitingListens.remove(target) }
                faults.waitingListens.subtract(envelope.targets)
            case "error":
                if let id = envelope.id { faults.waitingListens.remove(id) }
            default:
                break
            }
            return true
        }
    }
}

/// A mock server's users: who its client signs in as, and the keys their tokens are minted with.
final class MockAccounts: Sendable {
    let user: Mutex<String?>
    /// How many times the client asked for a token.
    let asked = Locked(0)
    let tokens: BearerTokens
    let rules: AccessRules

    init(user: String?, tokens: BearerTokens, rules: AccessRules) {
        self.user = Mutex(user)
        self.tokens = tokens
        self.rules = rules
    }

    /// The client's token provider: a fresh token of the user now, nil when signed out.
    var provide: TokenProvider {
        { [self] in
            asked.withLock { $0 += 1 }
            guard let uid = user.withLock({ $0 }) else { return nil }
            return try tokens.mint(subject: uid, lifetime: .seconds(3600))
        }
    }
}
