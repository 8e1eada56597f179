import Foundation
import Synchronization
import Hummingbird
import HummingbirdWebSocket
import Logging
import Testing
import Tandem
import TandemCore
import TandemTesting

/// The client's connection lifecycle on a manual clock: heartbeats, dead connections, backoff.
@Suite("Client connection", .timeLimit(.minutes(5)))
struct ConnectionTests {
    /// A WebSocket server that accepts `/v1/stream` and never says a word.
    static func silentServer() async throws -> (port: Int, task: Task<Void, any Error>) {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws("/v1/stream") { inbound, _, _ in
            for try await _ in inbound {}
        }
        var logger = Logger(label: "silent")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(webSocketRouter: router),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
            logger: logger
        )
        let task = Task { try await app.run() }
        var iterator = ports.makeAsyncIterator()
        return (await iterator.next() ?? 0, task)
    }

    /// A server started and stopped again: its port refuses connections, and starting one on its
    /// directory and port later brings it back.
    static func stoppedServer() async throws -> LiveServer {
        let server = try await LiveServer.start()
        await server.stop()
        return server
    }

    static func configure(_ clock: ManualClock) -> (inout TandemClientConfiguration) -> Void {
        { configuration in
            configuration.clock = clock
            configuration.heartbeatInterval = .seconds(1)
            configuration.missedHeartbeatsAllowed = 3
            configuration.reconnectPolicy = .exponential(initial: .seconds(2), maximum: .seconds(60))
        }
    }

    /// Waits until something sleeps on the clock until `offset` from now (awaited, not polled).
    func sleeper(on clock: ManualClock, after offset: Duration) async -> Bool {
        let deadline = clock.now.advanced(by: offset)
        await clock.waitForSleepers { $0.contains(deadline) }
        return true
    }

    @Test("a connection that stays silent for three heartbeats is dropped and replaced after the backoff")
    func deadConnection() async throws {
        let (port, serverTask) = try await Self.silentServer()
        let clock = ManualClock()
        let running = RunningClient(url: URL(string: "http://127.0.0.1:\(port)")!, id: "c", configure: Self.configure(clock))
        #expect(await sleeper(on: clock, after: .seconds(1)))  // the first heartbeat
        for _ in 0..<3 {
            clock.advance(by: .seconds(1))
            #expect(await sleeper(on: clock, after: .seconds(1)))
        }
        #expect(running.client.connectionAttempts == 1)
        clock.advance(by: .seconds(1))  // a fourth silent interval: dead
        #expect(await sleeper(on: clock, after: .seconds(2)))  // the backoff before attempt 2
        #expect(running.client.connectionAttempts == 1)
        clock.advance(by: .seconds(2))
        // Attempt 2 opens a socket and waits for its first heartbeat.
        #expect(await sleeper(on: clock, after: .seconds(1)))
        #expect(running.client.connectionAttempts == 2)
        #expect(!running.client.isConnected)
        await running.stop()
        serverTask.cancel()
    }

    @Test("a server that takes the connection and never answers the upgrade: the attempt is given up at the connect timeout on the clock, what waited for it fails (a read with unavailable; a write returns queued), the client tries again after the backoff, and stops without waiting for the socket")
    func unansweredUpgrade() async throws {
        let listener = try UnansweringListener()
        defer { listener.close() }
        let clock = ManualClock()
        let running = RunningClient(url: URL(string: "http://127.0.0.1:\(listener.port)")!, id: "c") { configuration in
            Self.configure(clock)(&configuration)
            configuration.connectTimeout = .seconds(5)
        }
        let read = Task { try await running.client.document(at: documentPath("notes/n")) }
        #expect(await sleeper(on: clock, after: .seconds(5)))  // the first attempt's deadline
        clock.advance(by: .seconds(5))
        do {
            _ = try await read.value
            Issue.record("a read answered without a server")
        } catch let error as TandemError {
            #expect(error.code == .unavailable)
        }
        #expect(await sleeper(on: clock, after: .seconds(2)))  // the backoff
        #expect(running.client.connectionAttempts == 1)
        clock.advance(by: .seconds(2))
        #expect(await sleeper(on: clock, after: .seconds(5)))  // the second attempt's deadline
        #expect(running.client.connectionAttempts == 2)

        // A write made while an attempt hangs is queued, and its call returns, at the deadline.
        let directory = TemporaryDirectory()
        let notes = try CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes")),
                                                   managerKey: "notes", persistence: SQLiteCollectionPersistence(managerKey: "notes", directory: directory.url))
        let write = Task { try await notes.saveDocument(Note(id: "n", text: "kept")) }
        clock.advance(by: .seconds(5))
        try await write.value
        #expect(notes.pendingWrites.count == 1)
        #expect(!running.client.isConnected)
        await running.stop()  // the last attempt's upgrade is never answered: not awaited
    }

    @Test("a token provider that never answers is given up at the connect timeout like an unanswered upgrade, and asked again after the backoff")
    func unansweredTokenProvider() async throws {
        let server = try await LiveServer.start()
        let clock = ManualClock()
        let asked = Atomic<Int>(0)
        let running = RunningClient(server, id: "c") { configuration in
            Self.configure(clock)(&configuration)
            configuration.connectTimeout = .seconds(5)
            configuration.tokenProvider = {
                asked.add(1, ordering: .relaxed)
                // Never answers (the stream never yields); ends when the attempt is cancelled.
                for await _ in AsyncStream<Void>(unfolding: { await withUnsafeContinuation { (_: UnsafeContinuation<Void?, Never>) in } }) {}
                return nil
            }
        }
        #expect(await sleeper(on: clock, after: .seconds(5)))  // the first attempt's deadline
        clock.advance(by: .seconds(5))
        #expect(await sleeper(on: clock, after: .seconds(2)))  // the backoff
        clock.advance(by: .seconds(2))
        #expect(await sleeper(on: clock, after: .seconds(5)))  // the second attempt's deadline
        #expect(asked.load(ordering: .relaxed) == 2)
        #expect(!running.client.isConnected)
        await running.stop()
        await server.stop()
    }

    @Test("reconnect delays draw their jitter from the configured generator")
    func reconnectJitter() async throws {
        let port = try await Self.stoppedServer().port
        let clock = ManualClock()
        let policy = RetryPolicy.exponential(jitter: 0.5)
        let running = RunningClient(url: URL(string: "http://127.0.0.1:\(port)")!, id: "c") { configuration in
            configuration.clock = clock
            configuration.reconnectPolicy = policy
            configuration.random = SeededRandomNumberGenerator(seed: 11)
        }
        var reference = SeededRandomNumberGenerator(seed: 11)
        for attempt in 1...3 {
            let delay = try #require(policy.delay(afterFailures: attempt, using: &reference))
            let deadline = clock.now.advanced(by: delay)
            // Each attempt (refused at once) has a connect deadline until it fails: wait for the backoff alone.
            let connecting = clock.now.advanced(by: .seconds(10))
            await clock.waitForSleepers { $0.count == 1 && $0 != [connecting] }
            #expect(clock.pendingDeadlines == [deadline], "attempt \(attempt)")
            #expect(delay != .seconds(1 << attempt), "attempt \(attempt) is spread")
            clock.advance(to: clock.pendingDeadlines.first ?? deadline)
        }
        await running.stop()
    }

    @Test("reconnects back off 2, 4, 8 s on the clock; a request while down tries at once; success resets")
    func backoff() async throws {
        let first = try await Self.stoppedServer()
        let port = first.port
        let clock = ManualClock()
        let running = RunningClient(url: URL(string: "http://127.0.0.1:\(port)")!, id: "c", configure: Self.configure(clock))
        for (attempt, delay) in [(1, 2), (2, 4), (3, 8)] {
            #expect(await sleeper(on: clock, after: .seconds(delay)), "attempt \(attempt)")
            #expect(running.client.connectionAttempts == attempt)
            clock.advance(by: .seconds(delay))
        }
        #expect(await sleeper(on: clock, after: .seconds(16)))
        #expect(running.client.connectionAttempts == 4)
        await #expect(throws: TandemError.self) { _ = try await running.client.document(at: documentPath("a/b")) }
        // Attempt 5 ran at once, the clock unmoved. It must have failed (and be waiting out its
        // backoff) before the server comes back: started earlier, the server could take that
        // attempt and leave nothing to wait for.
        #expect(await sleeper(on: clock, after: .seconds(32)))
        #expect(running.client.connectionAttempts == 5)
        let server = try await LiveServer.start(directory: first.directory, port: port)
        clock.advance(by: .seconds(32))
        await running.client.waitUntilConnected()
        #expect(try await running.client.document(at: documentPath("a/b")) == nil)
        let attempts = running.client.connectionAttempts
        await server.stop()
        // A connection that was up is retried at once, then the backoff starts again from 2 s.
        #expect(await sleeper(on: clock, after: .seconds(2)))
        #expect(running.client.connectionAttempts == attempts + 1)
        await running.stop()
    }

    @Test("waitUntilConnected returns once the client has stopped, connected or not")
    func waitEndsWithClient() async throws {
        let port = try await Self.stoppedServer().port
        let running = RunningClient(url: URL(string: "http://127.0.0.1:\(port)")!, id: "c", configure: Self.configure(ManualClock()))
        let waiting = Task { await running.client.waitUntilConnected() }
        await running.stop()
        await waiting.value
        await running.client.waitUntilConnected()  // and at once afterwards
        #expect(!running.client.isConnected)
    }
}

/// A port whose listener never accepts: the kernel completes each connection and takes what
/// is sent, and nothing answers, as with a server process that hangs. Closing it resets them.
final class UnansweringListener: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && listen(descriptor, 16) == 0 && getsockname(descriptor, address, &length) == 0
            }
        }
        guard descriptor >= 0, bound else { throw TandemError(.internal, "could not listen on 127.0.0.1") }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(descriptor) }
}
