import Foundation
import Logging
import Synchronization
import TandemCore
import TandemServer
import TandemTesting
import WSClient

/// Writes from one client sent without waiting for each answer, against the same writes sent one
/// at a time: what the server's ordered, pipelined write path gives a client that uses it.
extension ServerBenchmarks {
    static func pipelinedWrites(count: Int, window: Int, directory: URL, into report: inout BenchReport) async throws {
        // The per-connection write rate (5,000 a second by default) would be the figure otherwise.
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumWritesPerSecond = 10_000_000
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("pipelined"), configuration: configuration)
        let clock = ContinuousClock()
        let oneAtATime = try await clock.measure {
            try await PipelinedWriter(port: server.port, clientID: "bench-serial", window: 1).write(count: count, offset: 0)
        }
        let pipelined = try await clock.measure {
            try await PipelinedWriter(port: server.port, clientID: "bench-pipelined", window: window).write(count: count, offset: count)
        }
        let stored = try await server.store.read(.collection(try CollectionPath("pipelined"), Query())).documents.count
        precondition(stored == 2 * count, "bench: the server holds \(stored) of \(2 * count) documents")
        await server.stop()
        report.add("server: acknowledged writes/s, one client with up to \(window) writes in flight vs the same client one at a time (per-connection rate limit lifted)",
                   ours: pipelined, baseline: oneAtATime, operations: count, unit: "writes", target: nil)
    }
}

/// A client of the wire protocol that sends its writes in order, keeping up to `window` of them
/// waiting for their answers, each with its own mutation id.
struct PipelinedWriter {
    let port: Int
    let clientID: String
    let window: Int

    func write(count: Int, offset: Int) async throws {
        var logger = Logger(label: "bench-pipelined")
        logger.logLevel = .critical
        let failure = Mutex<String?>(nil)
        let client = WebSocketClient(url: "ws://127.0.0.1:\(port)/v1/stream", configuration: .init(maxFrameSize: 1 << 24), logger: logger) { inbound, outbound, _ in
            try await outbound.writeTextMessage(ClientMessage.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: nil).text)
            var messages = inbound.messages(maxSize: 1 << 24).makeAsyncIterator()
            guard case .text(let welcome)? = try await messages.next(), welcome.contains("welcome") else {
                failure.withLock { $0 = "no welcome" }
                return
            }
            var sent = 0
            var answered = 0
            while answered < count {
                while sent < count, sent - answered < window {
                    let index = offset + sent
                    let mutation = Mutation.set(try DocumentPath("pipelined/item-\(index)"), ServerBenchmarks.body(index))
                        .identified(by: MutationID(clientID: clientID, sequence: UInt64(sent + 1)))
                    try await outbound.writeTextMessage(ClientMessage.write(id: sent + 1, mutations: [mutation]).text)
                    sent += 1
                }
                guard case .text(let text)? = try await messages.next() else { break }
                switch try ServerMessage.parse(text) {
                case .ack:
                    answered += 1
                case .error(_, let error):
                    failure.withLock { $0 = "a write was refused: \(error)" }
                    return
                default:
                    break
                }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        try await client.run()
        if let failure = failure.withLock({ $0 }) {
            throw TandemError(.internal, "bench: \(failure)")
        }
    }
}
