import Foundation
import Logging
import WSClient
import Synchronization
import Tandem
import TandemCore
import TandemTesting

/// The write rate while many listeners receive every commit, against the same writes with none:
/// fan-out runs off the commit path, so listeners should cost the writers little.
extension ServerBenchmarks {
    static func writesUnderFanOut(clients: Int, perClient: Int, listeners: Int, directory: URL, into report: inout BenchReport) async throws {
        let quiet = try await fanOutRun(clients: clients, perClient: perClient, listeners: 0, directory: directory.appendingPathComponent("fanout-none"))
        let busy = try await fanOutRun(clients: clients, perClient: perClient, listeners: listeners, directory: directory.appendingPathComponent("fanout-\(listeners)"))
        let total = clients * perClient
        report.add("server: acknowledged writes/s, \(clients) clients writing one at a time while \(listeners) listeners receive every commit vs the same writes with no listeners",
                   ours: busy, baseline: quiet, operations: total, unit: "writes", target: 1.25)
        let ratio = quiet.doubleSeconds / busy.doubleSeconds
        report.notes.append(String(format: "server: with %d listeners the writers keep %.0f%% of their rate without any (target ≥ 80%%: %@)", listeners, ratio * 100, ratio >= 0.8 ? "meets" : "MISSES"))
    }

    /// The time `clients` clients take to get `perClient` writes each acknowledged, with
    /// `listeners` listeners on the collection, until every listener has every commit. The
    /// listeners run on 20 bare connections (50 to a connection at 1,000) that count the frames
    /// they receive without parsing them, so the figure is the server's fan-out, not the
    /// listening clients' work on the same two cores.
    static func fanOutRun(clients: Int, perClient: Int, listeners: Int, directory: URL) async throws -> Duration {
        let server = try await LiveServer.start(directory: directory)
        let collection = try CollectionPath("fanout")
        let connections = min(listeners, 20)
        let received = Reached(connections: connections)
        var listening: [Task<Void, any Error>] = []
        let ready = Reached(connections: connections)
        for connection in 0..<connections {
            let targets = Array(stride(from: connection, to: listeners, by: connections))
            listening.append(Task {
                try await countingListener(port: server.port, id: "bench-fanout-listener-\(connection)", targets: targets.count,
                                           collection: collection, ready: ready, received: received)
            })
        }
        await ready.wait(for: .zero)
        let writers = (0..<clients).map { client(server, "bench-fanout-writer-\($0)") }
        for (client, _) in writers { await client.waitUntilConnected() }
        let clock = ContinuousClock()
        let elapsed = try await clock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, (client, _)) in writers.enumerated() {
                    group.addTask {
                        for step in 0..<perClient {
                            let id = step * clients + index
                            _ = try await client.commit([.set(try collection.document("item-\(id)"), body(id))])
                        }
                    }
                }
                try await group.waitForAll()
            }
            // Until every connection's listeners have the last commit.
            await received.wait(for: try await server.store.currentVersion())
        }
        listening.forEach { $0.cancel() }
        for (_, task) in writers { task.cancel() }
        await server.stop()
        return elapsed
    }

    /// A bare connection running `targets` listeners on `collection`: it tells `ready` once their
    /// snapshots came, and `received` the version of every later `changes` frame (each names all
    /// of them; one may carry several commits), read from the frame's end without parsing it.
    static func countingListener(port: Int, id: String, targets: Int, collection: CollectionPath, ready: Reached, received: Reached) async throws {
        var logger = Logger(label: "bench-fanout")
        logger.logLevel = .critical
        let client = WebSocketClient(url: "ws://127.0.0.1:\(port)/v1/stream", configuration: .init(maxFrameSize: 1 << 24), logger: logger) { inbound, outbound, _ in
            try await outbound.writeTextMessage(ClientMessage.hello(clientID: id, protocolVersion: TandemVersion.wireProtocol, token: nil).text)
            for target in 0..<targets {
                try await outbound.writeTextMessage(ClientMessage.listen(id: target + 1, target: .collection(collection, Query()), resumeFrom: nil).text)
            }
            // Every target's snapshot first; after them, only change batches come, each naming
            // every target of the connection, and each is counted without being read.
            var snapshots = 0
            for try await frame in inbound {
                if snapshots < targets {
                    if String(buffer: frame.data).contains(#""type":"snapshot""#) { snapshots += 1 }
                    if snapshots == targets { ready.reach(.zero, connection: id) }
                    continue
                }
                // A whole `changes` message in one frame (the server sends up to 1 MiB a frame),
                // ending `…,"version":N}`.
                guard frame.fin else { continue }
                var version: UInt64 = 0, scale: UInt64 = 1
                frame.data.withUnsafeReadableBytes { bytes in
                    for byte in bytes.reversed().dropFirst() {
                        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { break }
                        version += UInt64(byte - UInt8(ascii: "0")) * scale
                        scale *= 10
                    }
                }
                received.reach(Version(version), connection: id)
            }
        }
        try await client.run()
    }
}

/// The version each connection's listeners have reached; wakes one waiter once all reach one.
final class Reached: Sendable {
    private struct State {
        var versions: [String: Version] = [:]
        var waiter: (version: Version, continuation: CheckedContinuation<Void, Never>)?
    }
    private let connections: Int
    private let state = Mutex(State())

    init(connections: Int) {
        self.connections = connections
    }

    func reach(_ version: Version, connection: String) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.versions[connection] = max(state.versions[connection] ?? .zero, version)
            guard let waiter = state.waiter, Self.all(state, reach: waiter.version, of: connections) else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns once every connection reached `version`.
    func wait(for version: Version) async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if Self.all(state, reach: version, of: connections) { return true }
                state.waiter = (version, continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    private static func all(_ state: State, reach version: Version, of connections: Int) -> Bool {
        state.versions.count >= connections && state.versions.values.allSatisfy { $0 >= version }
    }
}
