import Foundation
import Logging
import Synchronization
import Tandem
import TandemCore
import TandemTesting

/// The write rate while many listeners receive every commit, against the same writes with none:
/// fan-out runs off the commit path, so listeners should cost the writers little.
extension ServerBenchmarks {
    static func writesUnderFanOut(clients: Int, perClient: Int, listeners: Int, directory: URL, into report: inout BenchReport) async throws {
        // In turns, five times each, the fastest run of each kept: the machine's speed drifts by
        // more than the difference measured, and the first run of a process also pays for warming up.
        var quiet: (elapsed: Duration, cpu: Double)?
        var busy: (elapsed: Duration, cpu: Double)?
        for turn in 0..<5 {
            let none = try await fanOutRun(clients: clients, perClient: perClient, listeners: 0, directory: directory.appendingPathComponent("fanout-none-\(turn)"))
            if quiet == nil || none.elapsed < quiet!.elapsed { quiet = none }
            let many = try await fanOutRun(clients: clients, perClient: perClient, listeners: listeners, directory: directory.appendingPathComponent("fanout-\(listeners)-\(turn)"))
            if busy == nil || many.elapsed < busy!.elapsed { busy = many }
        }
        guard let quiet, let busy else { return }
        let total = clients * perClient
        report.add("server: acknowledged writes/s, \(clients) clients writing one at a time while \(listeners) listeners receive every commit vs the same writes with no listeners",
                   ours: busy.elapsed, baseline: quiet.elapsed, operations: total, unit: "writes", target: 1.25)
        let ratio = quiet.elapsed.doubleSeconds / busy.elapsed.doubleSeconds
        report.notes.append(String(format: "server: with %d listeners the writers keep %.0f%% of their rate without any (target ≥ 80%%: %@); CPU time (server, writers and listening connections together) %.2f s vs %.2f s",
                                   listeners, ratio * 100, ratio >= 0.8 ? "meets" : "MISSES", busy.cpu, quiet.cpu))
    }

    /// The time `clients` clients take to get `perClient` writes each acknowledged, with
    /// `listeners` listeners on the collection, until every listener has every commit, and the CPU
    /// time the process used meanwhile. The listeners run on 20 bare connections (50 to a
    /// connection at 1,000) that count the frames they receive on their event loop without parsing
    /// them (``CountingConnection``), so the figure is the server's fan-out, not the listening
    /// clients' work on the same two cores.
    static func fanOutRun(clients: Int, perClient: Int, listeners: Int, directory: URL) async throws -> (elapsed: Duration, cpu: Double) {
        let server = try await LiveServer.start(directory: directory)
        let collection = try CollectionPath("fanout")
        let connections = min(listeners, 20)
        let received = Reached(connections: connections)
        var listening: [Task<Void, any Error>] = []
        let ready = Reached(connections: connections)
        for connection in 0..<connections {
            let targets = Array(stride(from: connection, to: listeners, by: connections))
            listening.append(Task {
                try await CountingConnection.run(port: server.port, id: "bench-fanout-listener-\(connection)", targets: targets.count,
                                                 collection: collection, ready: ready, received: received)
            })
        }
        await ready.wait(for: .zero)
        let writers = (0..<clients).map { client(server, "bench-fanout-writer-\($0)") }
        for (client, _) in writers { await client.waitUntilConnected() }
        let clock = ContinuousClock()
        let cpu = processCPUSeconds()
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
        let used = processCPUSeconds() - cpu
        listening.forEach { $0.cancel() }
        for (_, task) in writers { task.cancel() }
        await server.stop()
        return (elapsed, used)
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

/// User and system CPU time the process has used, in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let seconds = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec
    let micros = usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
    return Double(seconds) + Double(micros) / 1_000_000
}
