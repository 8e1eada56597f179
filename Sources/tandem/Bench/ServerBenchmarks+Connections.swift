import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import NIOCore
import NIOPosix
import TandemCore
import WSClient

/// Whether connections opened and closed leave memory behind in the server: `tandem serve` runs as
/// a child process, so only its own memory is read (from /proc), never the clients'.
extension ServerBenchmarks {
    /// Cycles of `connections` WebSocket sessions (hello, welcome, close) against the same number
    /// of plain HTTP connections (GET /health, close); the server's resident memory is read after
    /// each cycle once every connection is gone, and its growth per connection is reported.
    static func connectionMemory(connections: Int, cycles: Int, directory: URL, into report: inout BenchReport) async throws {
        let server = try await ChildServer.start(directory: directory.appendingPathComponent("connections"))
        defer { server.stop() }
        var logger = Logger(label: "bench-connections")
        logger.logLevel = .critical
        // One cycle of each first: the allocator's and the runtime's first-use growth is not a leak.
        try await httpCycle(port: server.port, connections: connections)
        try await webSocketCycle(port: server.port, connections: connections, logger: logger)
        try await server.waitForNoSessions()

        func growth(_ cycle: () async throws -> Void) async throws -> (perConnection: Double, samples: [Int]) {
            var samples = [try server.residentBytes()]
            for _ in 0..<cycles {
                try await cycle()
                try await server.waitForNoSessions()
                samples.append(try server.residentBytes())
            }
            // The least-squares slope over the cycles, so one noisy sample does not decide it.
            let count = Double(samples.count)
            let meanX = (count - 1) / 2
            let meanY = Double(samples.reduce(0, +)) / count
            var numerator = 0.0, denominator = 0.0
            for (index, sample) in samples.enumerated() {
                numerator += (Double(index) - meanX) * (Double(sample) - meanY)
                denominator += (Double(index) - meanX) * (Double(index) - meanX)
            }
            return (numerator / denominator / Double(connections), samples)
        }
        let http = try await growth { try await httpCycle(port: server.port, connections: connections) }
        let webSocket = try await growth { try await webSocketCycle(port: server.port, connections: connections, logger: logger) }
        func kilobytes(_ samples: [Int]) -> String { samples.map { String($0 / 1024) }.joined(separator: ", ") }
        report.notes.append("server: resident memory after each of \(cycles) cycles of \(connections) connections (KiB): HTTP \(kilobytes(http.samples)); WebSocket \(kilobytes(webSocket.samples))")
        let allowed = max(64, http.perConnection + 64)
        report.notes.append(String(format: "server: memory left behind per WebSocket session opened and closed: %.0f bytes, beside %.0f bytes per plain HTTP connection (target ≤ the HTTP figure + 64 bytes: %@)",
                                   webSocket.perConnection, http.perConnection, webSocket.perConnection <= allowed ? "meets" : "MISSES"))
    }

    /// `connections` HTTP connections, 50 at a time, each one GET /health then closed.
    static func httpCycle(port: Int, connections: Int) async throws {
        try await inBatches(connections) {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port) { channel in
                    channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
                }
            try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(ByteBuffer(string: "GET /health HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"))
                for try await _ in inbound {}
            }
        }
    }

    /// `connections` WebSocket sessions, 50 at a time, each saying hello and closing at the welcome.
    static func webSocketCycle(port: Int, connections: Int, logger: Logger) async throws {
        try await inBatches(connections) {
            let client = WebSocketClient(url: "ws://127.0.0.1:\(port)/v1/stream", logger: logger) { inbound, outbound, _ in
                try await outbound.writeTextMessage(ClientMessage.hello(clientID: "bench-\(UUID().uuidString)", protocolVersion: TandemVersion.wireProtocol, token: nil).text)
                var messages = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
                _ = try await messages.next()
                try await outbound.close(.normalClosure, reason: nil)
            }
            try await client.run()
        }
    }

    static func inBatches(_ count: Int, _ body: @escaping @Sendable () async throws -> Void) async throws {
        var started = 0
        while started < count {
            let batch = min(50, count - started)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<batch { group.addTask { try await body() } }
                try await group.waitForAll()
            }
            started += batch
        }
    }
}

/// `tandem serve` in a child process on a free port, for figures about the server process alone.
final class ChildServer: Sendable {
    let process: Process
    let port: Int

    private init(process: Process, port: Int) {
        self.process = process
        self.port = port
    }

    static func start(directory: URL) async throws -> ChildServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        process.arguments = ["serve", "--port", "0", "--data-dir", directory.path, "--log-level", "critical"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // "listening on http://127.0.0.1:PORT"
        var text = ""
        while !text.contains("\n") {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
        }
        guard let port = text.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            process.terminate()
            throw TandemError(.unavailable, "bench: the child server did not say where it listens: \(text)")
        }
        return ChildServer(process: process, port: port)
    }

    /// The child's resident set size, from /proc.
    func residentBytes() throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") else {
            throw TandemError(.unavailable, "bench: no VmRSS in /proc/\(process.processIdentifier)/status")
        }
        return kilobytes * 1024
    }

    /// Returns once the server's `/metrics` says no WebSocket session is open (it closes them
    /// after their clients go), looking every 10 ms.
    func waitForNoSessions() async throws {
        let url = URL(string: "http://127.0.0.1:\(port)/metrics")!
        while true {
            let (data, _) = try await URLSession.shared.data(from: url)
            let sessions = String(decoding: data, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("tandem_stream_sessions ") }
            if let sessions, Double(sessions.dropFirst("tandem_stream_sessions ".count)) == 0 { return }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
