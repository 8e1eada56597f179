import Foundation
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// The WebSocket upgrade and the frames behind it, over raw sockets: bytes a client pipelines
/// behind its upgrade request reach the WebSocket (they once ended the process), upgrades the
/// server does not take are answered with a status and the JSON error shape, and frames that break
/// the framing rules close the connection with the code RFC 6455 gives them.
@Suite("Upgrade hardening", .timeLimit(.minutes(5)))
struct UpgradeHardeningTests {
    /// A server whose clock never moves: a connection closes because of what it sent, never a timeout.
    static func start(_ adjust: (inout SyncServerConfiguration) -> Void = { _ in }) async throws -> LiveServer {
        var configuration = SyncServerConfiguration()
        configuration.clock = ManualClock()
        adjust(&configuration)
        return try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
    }

    static func upgrade(path: String = "/v1/stream", version: String? = "13", key: Bool = true, extra: String = "") -> String {
        var request = "GET \(path) HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        if key { request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" }
        if let version { request += "Sec-WebSocket-Version: \(version)\r\n" }
        return request + extra + "\r\n"
    }

    static let hello = Array(ClientMessage.hello(clientID: "pipelined", protocolVersion: TandemVersion.wireProtocol, token: nil).text.utf8)

    @Test("a hello pipelined behind the upgrade request, in the same packet, is welcomed")
    func pipelinedHello() async throws {
        let server = try await Self.start()
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send(Array(Self.upgrade().utf8) + Frame.masked(.text, Self.hello))
        let head = try #require(RawResponse(try await connection.readResponse()))
        #expect(head.status == 101)
        let frame = try #require(await Frame.read(from: connection))
        #expect(frame.opcode == .text)
        guard case .welcome? = try? ServerMessage.parse(String(decoding: frame.payload, as: UTF8.self)) else {
            Issue.record("expected welcome, got \(String(decoding: frame.payload, as: UTF8.self))")
            return
        }
        await connection.close()
        await server.stop()
    }

    @Test("one byte behind an upgrade request (the packet that once ended the process) leaves the server serving")
    func oneByte() async throws {
        let server = try await Self.start()
        for suffix in ["x", "\u{0}", "GET /health HTTP/1.1\r\n\r\n"] {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send(Self.upgrade() + suffix)
            #expect(RawResponse(try await connection.readResponse())?.status == 101)
            await connection.close()
        }
        #expect(try await Self.health(server))
        await server.stop()
    }

    @Test("a seeded fuzz pass over the upgrade path: requests of every kind with bytes pipelined behind them never end the server")
    func fuzz() async throws {
        let seed = ProcessInfo.processInfo.environment["TANDEM_FUZZ_SEED"].flatMap(UInt64.init) ?? 20_261_125
        let iterations = max(200, (ProcessInfo.processInfo.environment["TANDEM_FUZZ_ITERATIONS"].flatMap(Int.init) ?? 10_000) / 25)
        var random = SeededRandomNumberGenerator(seed: seed)
        let server = try await Self.start { $0.limits.maximumRequestBytes = 4096 }
        let requests = [
            Self.upgrade(), Self.upgrade(path: "/health"), Self.upgrade(version: "8"), Self.upgrade(version: nil), Self.upgrade(key: false),
            Self.upgrade(extra: "Connection: close\r\n"), Self.upgrade(extra: "Content-Length: 5\r\n"),
            "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", "GET /v1/stream HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ]
        for iteration in 0..<iterations {
            var bytes = Array(requests[Int.random(in: 0..<requests.count, using: &random)].utf8)
            switch Int.random(in: 0..<8, using: &random) {
            case 0: bytes += (0..<Int.random(in: 1...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            case 1: bytes += Frame.masked(.text, Self.hello)
            case 2: bytes += Frame.unmasked(.text, Self.hello)
            case 3: bytes += [0x81, 0xFF] + [0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF] + [1, 2, 3, 4]
            case 4: bytes += Frame.masked(.continuation, [1, 2, 3])
            case 5: bytes += Frame.masked(.text, [0x7B], fin: false) + Frame.masked(.text, [0x7D])
            case 6: bytes += Array("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
            default: bytes += Frame.masked(.text, Self.hello) + Frame.masked(.connectionClose, [0x03, 0xE8])
            }
            // Cut into up to three writes at random points.
            var cuts = (0..<Int.random(in: 0...2, using: &random)).map { _ in Int.random(in: 0...bytes.count, using: &random) }.sorted()
            cuts.append(bytes.count)
            let connection = try await RawConnection.open(port: server.port)
            var start = 0
            for cut in cuts where cut > start {
                // The server may have answered and closed already.
                try? await connection.send(Array(bytes[start..<cut]))
                start = cut
            }
            if iteration.isMultiple(of: 3) { _ = try await connection.readResponse() }
            await connection.close()
            if iteration.isMultiple(of: 50) { #expect(try await Self.health(server), "iteration \(iteration)") }
        }
        #expect(try await Self.health(server))
        let stream = RawStream(port: server.port)
        #expect(await stream.hello("after-the-fuzz"))
        await stream.close()
        await server.stop()
    }

    @Test("an upgrade anywhere but /v1/stream, without a key, or to another version is refused with a status and JSON, and closed")
    func refusedUpgrades() async throws {
        let server = try await Self.start()
        let cases: [(String, Int, String)] = [
            (Self.upgrade(path: "/health"), 400, "invalid-argument"),
            (Self.upgrade(path: "/v1/documents/a/b"), 400, "invalid-argument"),
            (Self.upgrade(key: false), 400, "invalid-argument"),
            (Self.upgrade(version: "8"), 426, "failed-precondition"),
            (Self.upgrade(version: nil), 426, "failed-precondition"),
        ]
        for (request, status, code) in cases {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send(request)
            let response = try #require(RawResponse(try await connection.readUntilClosed()), "\(request)")
            #expect(response.status == status, "\(request)")
            #expect(response.errorCode == code, "\(request): \(response.body)")
            #expect(response.headers["content-type"] == "application/json")
            #expect(response.headers["connection"] == "close")
            if status == 426 { #expect(response.headers["sec-websocket-version"] == "13") }
            await connection.close()
        }
        #expect(try await Self.health(server))
        await server.stop()
    }

    @Test("frames that break the framing rules close the connection with 1002; one over the size limit with 1009, readable before the socket goes")
    func badFrames() async throws {
        let server = try await Self.start { $0.limits.maximumRequestBytes = 4096 }
        let cases: [(String, [UInt8], UInt16)] = [
            ("an unmasked frame", Frame.unmasked(.text, Self.hello), 1002),
            ("a new message inside a fragmented one", Frame.masked(.text, Array(Self.hello.prefix(5)), fin: false) + Frame.masked(.text, Self.hello), 1002),
            ("a continuation of nothing", Frame.masked(.continuation, Self.hello), 1002),
            ("a frame over the limit", Frame.masked(.text, [UInt8](repeating: 0x20, count: 64 * 1024)), 1009),
        ]
        for (name, frames, code) in cases {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send(Array(Self.upgrade().utf8) + Frame.masked(.text, Self.hello))
            #expect(RawResponse(try await connection.readResponse())?.status == 101, "\(name)")
            #expect(try #require(await Frame.read(from: connection), "\(name)").opcode == .text)
            try? await connection.send(frames)
            var close: Frame?
            while let frame = await Frame.read(from: connection) {
                if frame.opcode == .connectionClose { close = frame; break }
            }
            let closeCode = close.flatMap { $0.payload.count >= 2 ? UInt16($0.payload[0]) << 8 | UInt16($0.payload[1]) : nil }
            #expect(closeCode == code, "\(name): \(String(describing: close))")
            await connection.close()
        }
        #expect(try await Self.health(server))
        await server.stop()
    }

    @Test("a body declared over the limit is refused with 413 at once, from the head, before any of it is sent")
    func declaredBodyTooLarge() async throws {
        let server = try await Self.start { $0.limits.maximumRequestBytes = 4096 }
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send("PUT /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 20000000\r\n\r\n")
        let response = try #require(RawResponse(try await connection.readUntilClosed()))
        #expect(response.status == 413 && response.errorCode == "resource-exhausted", "\(response)")
        await connection.close()
        await server.stop()
    }

    @Test("Connection: close is honoured: the connection closes once its request is answered")
    func connectionClose() async throws {
        let server = try await Self.start()
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        let response = try #require(RawResponse(try await connection.readUntilClosed()))
        #expect(response.status == 200)
        await connection.close()
        await server.stop()
    }

    /// Whether a fresh connection gets 200 from `/health`.
    static func health(_ server: LiveServer) async throws -> Bool {
        let connection = try await RawConnection.open(port: server.port)
        try await connection.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        let response = RawResponse(try await connection.readResponse())
        await connection.close()
        return response?.status == 200
    }
}

/// A WebSocket frame as the tests write and read it.
struct Frame: CustomStringConvertible {
    enum Opcode: UInt8 {
        case continuation = 0, text = 1, binary = 2, connectionClose = 8, ping = 9, pong = 10
    }

    var opcode: Opcode
    var payload: [UInt8]

    var description: String { "\(opcode) \(payload.count) bytes" }

    static func masked(_ opcode: Opcode, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        let mask: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
        return header(opcode, payload.count, fin: fin, masked: true) + mask + payload.enumerated().map { $1 ^ mask[$0 % 4] }
    }

    static func unmasked(_ opcode: Opcode, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        header(opcode, payload.count, fin: fin, masked: false) + payload
    }

    private static func header(_ opcode: Opcode, _ length: Int, fin: Bool, masked: Bool) -> [UInt8] {
        let first = (fin ? 0x80 : 0) | opcode.rawValue
        let maskBit: UInt8 = masked ? 0x80 : 0
        if length < 126 { return [first, maskBit | UInt8(length)] }
        if length < 65_536 { return [first, maskBit | 126, UInt8(length >> 8), UInt8(length & 0xFF)] }
        return [first, maskBit | 127] + (0..<8).reversed().map { UInt8((length >> ($0 * 8)) & 0xFF) }
    }

    /// The length of the unmasked frame at the front of `bytes`, once it is all there.
    static func length(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2 else { return nil }
        var length = Int(bytes[1] & 0x7F)
        var header = 2
        if length == 126 {
            guard bytes.count >= 4 else { return nil }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            header = 4
        } else if length == 127 {
            guard bytes.count >= 10 else { return nil }
            length = bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            header = 10
        }
        return bytes.count >= header + length ? header + length : nil
    }

    /// The next frame from the server (which never masks); nil when the connection closed first.
    static func read(from connection: RawConnection) async -> Frame? {
        let bytes = await connection.read { bytes, _ in length(bytes) }
        guard let total = length(bytes), total == bytes.count, let opcode = Opcode(rawValue: bytes[0] & 0x0F) else { return nil }
        let code = bytes[1] & 0x7F
        let header = code == 126 ? 4 : code == 127 ? 10 : 2
        return Frame(opcode: opcode, payload: Array(bytes[header...]))
    }
}
