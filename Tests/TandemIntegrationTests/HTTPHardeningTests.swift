import Foundation
import Logging
import Synchronization
import Testing
import TandemCore
@testable import TandemServer
import TandemTesting

/// Malformed HTTP, silent peers and slow ones, over real sockets: every malformed request gets a
/// status and the JSON error shape and its connection is closed; what a peer holds open is closed
/// on the server's clock.
@Suite("HTTP hardening")
struct HTTPHardeningTests {
    static let big = String(repeating: "a", count: 100_000)

    /// Requests that are not valid HTTP/1.1, each with the status it must get.
    static let malformed: [(String, [UInt8], Int)] = [
        ("a space in the path", Array("GET /v1/documents/a b HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 400),
        ("é in the path", Array("GET /v1/documents/é HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 400),
        ("a raw byte in the path", Array("GET /v1/documents/a".utf8) + [0xFF] + Array(" HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 400),
        ("a 100 KB path", Array("GET /v1/documents/\(big) HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 431),
        ("a negative Content-Length", Array("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n{}".utf8), 400),
        ("a doubled Content-Length", Array("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".utf8), 400),
        ("chunked and Content-Length", Array("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}".utf8), 400),
        ("a bad chunk size", Array("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".utf8), 400),
        ("an unknown method", Array("FROBNICATE /health HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 501),
        ("the HTTP/2 preface", Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8), 505),
        ("a garbage request line (read as an unknown method)", Array("hello there\r\n\r\n".utf8), 501),
        ("a request line of symbols", Array("{}[] /x HTTP/1.1\r\n\r\n".utf8), 501),
        ("an unknown HTTP version", Array("GET /health HTTP/9.9\r\nHost: localhost\r\n\r\n".utf8), 505),
        ("a 100 KB header", Array("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: \(big)\r\n\r\n".utf8), 431),
        ("2,000 headers", Array(("GET /health HTTP/1.1\r\nHost: localhost\r\n" + (0..<2_000).map { "X-\($0): v\r\n" }.joined() + "\r\n").utf8), 431),
        ("a header without a colon", Array("GET /health HTTP/1.1\r\nHost: localhost\r\nno colon here\r\n\r\n".utf8), 400),
        ("a NUL byte in a header", Array("GET /health HTTP/1.1\r\nHost: localhost\r\nX-A: a".utf8) + [0] + Array("b\r\n\r\n".utf8), 400),
        ("a bare LF inside the request line", Array("GET /health\nHTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 400),
        ("a control byte in the path", Array("GET /v1/documents/a".utf8) + [0x01] + Array(" HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), 400),
        ("a malformed second request after a good one", Array("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /a b HTTP/1.1\r\n\r\n".utf8), 400),
    ]

    static var configuration: SyncServerConfiguration {
        var configuration = SyncServerConfiguration()
        // Long enough that a connection closes because of what it sent, not a timeout.
        configuration.idleTimeout = .seconds(30)
        return configuration
    }

    @Test("every malformed request is answered with a status and the JSON error shape, and its connection closed", arguments: 0..<malformed.count)
    func malformedRequests(_ index: Int) async throws {
        let (name, bytes, status) = Self.malformed[index]
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: Self.configuration)
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send(bytes)
        var text = try await connection.readUntilClosed()
        // A good request before the bad one is answered first.
        if text.hasPrefix("HTTP/1.1 200"), let next = text.range(of: "HTTP/1.1 ", range: text.index(after: text.startIndex)..<text.endIndex) {
            text = String(text[next.lowerBound...])
        }
        let response = try #require(RawResponse(text), "\(name): no response, got \(text.prefix(200))")
        #expect(response.status == status, "\(name): \(text.prefix(300))")
        #expect(response.headers["content-type"] == "application/json", "\(name)")
        #expect(response.headers["connection"] == "close", "\(name)")
        #expect(response.errorCode != nil, "\(name): \(response.body)")
        await connection.close()
        await server.stop()
    }

    @Test("malformed requests and refused upgrades log nothing at error level: no peer can fill the log", .timeLimit(.minutes(5)))
    func malformedRequestsStayQuiet() async throws {
        let lines = Locked<[(Logger.Level, String)]>([])
        var configuration = Self.configuration
        configuration.logger = Logger(label: "quiet-test") { _ in RecordingLogHandler(lines: lines) }
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let requests = Self.malformed.map(\.1) + [
            Array("GET /health HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".utf8),
            Array("GET /v1/stream HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n".utf8),
        ]
        for bytes in requests {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send(bytes)
            _ = try await connection.readUntilClosed()
            await connection.close()
        }
        // A request served after them: everything logged before it has been logged.
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(RawResponse(try await connection.readResponse())?.status == 200)
        await connection.close()
        // Taken before the server stops: stopping cancels connections, which it may log.
        let loud = lines.withLock { $0 }.filter { $0.0 >= .error }
        #expect(loud.isEmpty, "\(loud.prefix(3).map(\.1))")
        await server.stop()
    }

    @Test("what no route serves gets JSON: an unknown path 404, a wrong method 405 with Allow; OPTIONS lists methods; HEAD is GET without a body")
    func routesAnswerJSON() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: Self.configuration)
        let connection = try await RawConnection.open(port: server.port)
        func exchange(_ request: String) async throws -> RawResponse {
            try await connection.send(request)
            return try #require(RawResponse(try await connection.readResponse()))
        }
        var response = try await exchange("GET /nowhere HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(response.status == 404 && response.errorCode == "not-found")
        response = try await exchange("GET /v1/documents/ HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect((400...404).contains(response.status) && response.errorCode != nil, "\(response)")
        response = try await exchange("POST /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
        #expect(response.status == 405 && response.errorCode == "unimplemented" && response.headers["allow"]?.contains("GET") == true)
        response = try await exchange("OPTIONS /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(response.status == 204 && response.headers["allow"] == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS")
        response = try await exchange("GET /v1/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(response.status == 426 && response.headers["upgrade"] == "websocket" && response.errorCode == "failed-precondition")
        response = try await exchange("OPTIONS /nowhere HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(response.status == 404 && response.errorCode == "not-found")
        // HEAD answers GET's status and headers with no body; the next request on the connection works.
        try await connection.send("HEAD /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        try await connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        let both = try await connection.readResponse()
        #expect(both.hasPrefix("HTTP/1.1 200"))
        await connection.close()
        await server.stop()
    }

    @Test("Connection: close is honoured: the answer says so, the connection closes after it, and a request pipelined behind it is neither served nor applied")
    func connectionClose() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: Self.configuration)
        let connection = try await RawConnection.open(port: server.port)
        let body = #"{"n": 1}"#
        try await connection.send("PUT /v1/documents/a/first HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            + "PUT /v1/documents/a/second HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let text = try await connection.readUntilClosed()
        #expect(text.components(separatedBy: "HTTP/1.1 ").count == 2, "one answer: \(text)")
        let response = try #require(RawResponse(text))
        #expect(response.status == 200 && response.headers["connection"]?.lowercased() == "close", "\(response)")
        #expect(try await server.store.document(at: DocumentPath("a/first")) != nil)
        #expect(try await server.store.document(at: DocumentPath("a/second")) == nil, "the request behind the last was applied")
        // A keep-alive request before it is answered as usual, without the header.
        let second = try await RawConnection.open(port: server.port)
        try await second.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        let both = try await second.readUntilClosed()
        let answers = both.components(separatedBy: "HTTP/1.1 200").count - 1
        #expect(answers == 2, "\(both)")
        #expect(both.lowercased().components(separatedBy: "connection: close").count == 2, "only the last answer says close: \(both)")
        await server.stop()
    }

    @Test("a document id of . or .., sent as is, is refused with invalid-argument and nothing is stored")
    func dotSegments() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: Self.configuration)
        for target in ["/v1/documents/a/..", "/v1/documents/a/.", "/v1/documents/a/b/../c", "/v1/documents/a/%2E%2E"] {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send("PUT \(target) HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            let response = try #require(RawResponse(try await connection.readResponse()))
            #expect(response.status == 400 && response.errorCode == "invalid-argument", "\(target): \(response)")
            await connection.close()
        }
        #expect(try await server.store.currentVersion() == 0)
        await server.stop()
    }

    @Test("a silent connection, a half-sent head and a stalled body are closed on the server's clock; a half-sent head and body get 408")
    func timeouts() async throws {
        let clock = ManualClock()
        var configuration = SyncServerConfiguration()
        configuration.clock = clock
        configuration.idleTimeout = .seconds(60)
        configuration.requestHeadTimeout = .seconds(10)
        configuration.requestBodyTimeout = .seconds(30)
        // The heartbeat watchdog ticks on this clock too; far out of the way, a wait for a guard's
        // deadline cannot be met by a tick that falls on the same instant (10 s ticks did, at 70 s).
        configuration.heartbeatInterval = .seconds(10_000)
        // The store's housekeeping sleeps on a clock of its own: this one holds only the guards' timers.
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)

        // Silent: closed after the idle timeout, without an answer.
        let silent = try await RawConnection.open(port: server.port)
        await clock.waitForSleepers { $0.contains(.init(offset: .seconds(60))) }
        clock.advance(by: .seconds(59))
        // A second early, the idle timer is still waiting.
        #expect(clock.pendingDeadlines.contains(.init(offset: .seconds(60))))
        clock.advance(by: .seconds(1))
        #expect(try await silent.readUntilClosed() == "")

        // Half a head: 408 once the head timeout passes.
        let slowHead = try await RawConnection.open(port: server.port)
        try await slowHead.send("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Partial: ")
        // The head's timer, armed when its first bytes arrived: ten seconds from now.
        let headDeadline = clock.now.advanced(by: .seconds(10))
        await clock.waitForSleepers { $0.contains(headDeadline) }
        clock.advance(by: .seconds(10))
        let headAnswer = try #require(RawResponse(try await slowHead.readUntilClosed()))
        #expect(headAnswer.status == 408 && headAnswer.errorCode == "deadline-exceeded")

        // A head, then part of the body: 408 once the body timeout passes.
        let slowBody = try await RawConnection.open(port: server.port)
        try await slowBody.send("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"n\":")
        let bodyDeadline = clock.now.advanced(by: .seconds(30))
        await clock.waitForSleepers { $0.contains(bodyDeadline) }
        clock.advance(by: .seconds(30))
        let bodyAnswer = try #require(RawResponse(try await slowBody.readUntilClosed()))
        #expect(bodyAnswer.status == 408 && bodyAnswer.errorCode == "deadline-exceeded")
        #expect(try await server.store.currentVersion() == 0)

        // A keep-alive connection after its answer is idle again: closed after the idle timeout.
        let keepAlive = try await RawConnection.open(port: server.port)
        try await keepAlive.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(try await keepAlive.readResponse().hasPrefix("HTTP/1.1 200"))
        let idleDeadline = clock.now.advanced(by: .seconds(60))
        await clock.waitForSleepers { $0.contains(idleDeadline) }
        clock.advance(by: .seconds(60))
        #expect(try await keepAlive.readUntilClosed() == "")
        await server.stop()
    }

    @Test("an upgrade request is guarded until its upgrade is granted: one whose body never comes gets 408")
    func upgradeGuardedUntilGranted() async throws {
        let clock = ManualClock()
        var configuration = SyncServerConfiguration()
        configuration.clock = clock
        configuration.requestBodyTimeout = .seconds(30)
        configuration.heartbeatInterval = .seconds(10_000)
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        // A complete handshake that announces a body and sends none: the upgrade waits for the
        // request's end, and asking for it buys no freedom from the body's timeout.
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send("GET /v1/stream HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 10\r\n\r\n")
        let bodyDeadline = clock.now.advanced(by: .seconds(30))
        await clock.waitForSleepers { $0.contains(bodyDeadline) }
        clock.advance(by: .seconds(30))
        let answer = try #require(RawResponse(try await connection.readUntilClosed()))
        #expect(answer.status == 408 && answer.errorCode == "deadline-exceeded")
        // A granted upgrade leaves HTTP's timeouts behind: the stream answers long after them.
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("upgraded"), "expected welcome")
        clock.advance(by: .seconds(120))
        stream.send(.get(id: 1, path: try DocumentPath("a/b")))
        guard case .documents(1, _, _)? = await stream.next() else { Issue.record("expected an answer on the stream"); return }
        await stream.close()
        await server.stop()
    }

    @Test("on the real clock, the timeouts run as event-loop timers: a silent connection and a half-sent head are closed")
    func timeoutsOnTheRealClock() async throws {
        // Each timeout on a server of its own, the other one far away: on a loaded machine the time
        // between connecting and sending the first bytes could outlast a short idle timeout.
        var idle = SyncServerConfiguration()
        idle.idleTimeout = .milliseconds(200)
        let idleServer = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: idle)
        let silent = try await RawConnection.open(port: idleServer.port)
        #expect(try await silent.readUntilClosed() == "")
        await idleServer.stop()

        var head = SyncServerConfiguration()
        head.idleTimeout = .seconds(600)
        head.requestHeadTimeout = .milliseconds(200)
        let headServer = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: head)
        let slowHead = try await RawConnection.open(port: headServer.port)
        try await slowHead.send("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Partial: ")
        #expect(RawResponse(try await slowHead.readUntilClosed())?.status == 408)
        await headServer.stop()
    }

    @Test("at the connection cap /health and /metrics are still answered on a connection kept for probes, anything else there is 503 with Retry-After; past the probes' room a connection waits until one closes")
    func connectionCap() async throws {
        var configuration = Self.configuration
        configuration.maximumConnections = 2
        // The first connections stay open, idle, until the test closes them: beside the whole
        // suite on two cores the round trips below have taken over 30 s.
        configuration.idleTimeout = .seconds(600)
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let first = try await RawConnection.open(port: server.port)
        let second = try await RawConnection.open(port: server.port)
        try await second.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(try await second.readResponse().hasPrefix("HTTP/1.1 200"))
        // Full: a probe is answered at once, on a connection of the probes' room.
        let probe = try await RawConnection.open(port: server.port)
        try await probe.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(try await probe.readResponse().hasPrefix("HTTP/1.1 200"))
        try await probe.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(try await probe.readResponse().hasPrefix("HTTP/1.1 200"))
        // Anything else there is told the server is full, and when to come back.
        let other = try await RawConnection.open(port: server.port)
        try await other.send("GET /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\n\r\n")
        let refused = try #require(RawResponse(try await other.readUntilClosed()))
        #expect(refused.status == 503)
        #expect(refused.headers["retry-after"] == "1")
        #expect(refused.body.contains("most connections it allows (2)"))
        await probe.close()
        // Past the probes' room too, a connection waits to be served until one closes.
        var held: [RawConnection] = []
        for _ in 0..<ConnectionCapacity.reserve { held.append(try await RawConnection.open(port: server.port)) }
        for connection in held {
            try await connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try await connection.readResponse().hasPrefix("HTTP/1.1 200"))
        }
        let firstClosed = Flag()
        let waiting = try await RawConnection.open(port: server.port)
        try await waiting.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        let answered = Task { () -> Bool in
            let text = try await waiting.readResponse()
            return text.hasPrefix("HTTP/1.1 200") && firstClosed.isSet
        }
        // Round trips on the second connection give the server every chance to serve it early.
        for _ in 0..<20 {
            try await second.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            #expect(try await second.readResponse().hasPrefix("HTTP/1.1 200"))
        }
        firstClosed.set()
        await first.close()
        #expect(try await answered.value, "a connection past the probes' room was served while all were open")
        for connection in held { await connection.close() }
        await second.close()
        await waiting.close()
        await server.stop()
    }
}

/// A flag set once, read from any task.
final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

/// Keeps every line logged, with its level.
struct RecordingLogHandler: LogHandler {
    let lines: Locked<[(Logger.Level, String)]>
    var metadata: Logger.Metadata = [:]
    /// Always everything: a test server quiets its logger, and this one is to hear it all.
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
        lines.withLock { $0.append((event.level, "\(event.message) \(event.metadata ?? [:])")) }
    }
}
