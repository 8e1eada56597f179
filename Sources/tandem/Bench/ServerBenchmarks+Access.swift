import Foundation
import Synchronization
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// `tandem bench server --auth`: the same writes and listeners on an open server and on one with
/// an auth secret and a 20-rule file, in turns, in one run.
extension ServerBenchmarks {
    /// Twenty rules; the documents written match the last one, so every write is checked against
    /// every pattern before its own, and its conditions read the caller and the written document.
    static let benchRules: String = {
        var lines = ["rules:"]
        for index in 0..<17 {
            lines += ["  - match: area\(index)/{doc}", "    read: auth != null", "    write: auth.token.role == 'editor' && request.data.owner == auth.uid"]
        }
        lines += ["  - match: users/{uid}/{rest=**}", "    read: auth.uid == uid", "    write: auth.uid == uid"]
        lines += ["  - match: latency/{doc}", "    read: resource.data.owner == auth.uid", "    write: auth != null && request.data.owner == auth.uid"]
        lines += ["  - match: items/{item}", "    read: resource.data.owner == auth.uid",
                  "    create: auth != null && request.data.owner == auth.uid",
                  "    update: resource.data.owner == auth.uid && request.data.owner == auth.uid",
                  "    delete: resource.data.owner == auth.uid"]
        return lines.joined(separator: "\n") + "\n"
    }()

    static func accessCost(writes: Int, directory: URL, into report: inout BenchReport) async throws {
        let secret = String(repeating: "bench-secret-", count: 4)
        let tokens = try await BearerTokens(secret: secret)
        let rules = try AccessRules(parsing: benchRules)
        var secured = SyncServerConfiguration()
        secured.access = AccessControl(tokens: tokens, rules: rules)
        let token = try tokens.mint(subject: "bench", lifetime: .seconds(86_400))
        report.notes.append("secured server: HS256 tokens, \(rules.count) rules; the written documents match the last")

        for clients in [1, 16] {
            let perClient = clients == 1 ? writes : max(1, writes / 8)
            var open: [Duration] = [], closed: [Duration] = []
            var openTrips: [Duration] = [], closedTrips: [Duration] = []
            // In turns, the fastest of three each: the machine's speed drifts more than the cost.
            for round in 0..<3 {
                let (a, tripsA) = try await writeRun(clients: clients, perClient: perClient, directory: directory.appendingPathComponent("open-\(clients)-\(round)"),
                                                     configuration: SyncServerConfiguration(), token: nil)
                let (b, tripsB) = try await writeRun(clients: clients, perClient: perClient, directory: directory.appendingPathComponent("secured-\(clients)-\(round)"),
                                                     configuration: secured, token: token)
                open.append(a)
                closed.append(b)
                if a == open.min() { openTrips = tripsA }
                if b == closed.min() { closedTrips = tripsB }
            }
            report.notes.append("writes, \(clients) client\(clients == 1 ? "" : "s"): round trip secured \(percentiles(closedTrips)), open \(percentiles(openTrips))")
            report.add("access: acknowledged writes/s, \(clients) client\(clients == 1 ? "" : "s"), secured vs open",
                       ours: closed.min()!, baseline: open.min()!, operations: clients * perClient, unit: "writes", target: 1.1)
        }

        // Commit-to-listener: 100 listeners whose query's filter proves the rule.
        let query = Query().whereField("owner", isEqualTo: "bench")
        var openP50: [Duration] = [], securedP50: [Duration] = []
        var lines: [String] = []
        for _ in 0..<3 {
            let (a, _) = try await latency(listeners: 100, commits: 200, directory: directory, query: query, body: ["owner": "bench"])
            let (b, _) = try await latency(listeners: 100, commits: 200, directory: directory, configuration: secured, token: token, query: query, body: ["owner": "bench"])
            openP50.append(a[a.count / 2])
            securedP50.append(b[b.count / 2])
            lines.append("secured \(percentiles(b)), open \(percentiles(a))")
        }
        report.notes.append("commit-to-listener, 100 listeners: " + lines.joined(separator: "; "))
        report.add("access: commit-to-listener p50, 100 listeners, secured vs open (best of 3)",
                   ours: securedP50.min()!, baseline: openP50.min()!, operations: 1, unit: "commits", target: 1.1)
    }

    /// `clients` clients each committing `perClient` writes one at a time (with `owner: "bench"`),
    /// client `c` writing `items/item-(step * clients + c)`: the documents of one step are those of
    /// one baseline transaction. Returns the time and each write's round trip, once every write is
    /// applied and stored; `inspect` reads the server before it stops.
    static func writeRun(clients: Int, perClient: Int, directory: URL, configuration: SyncServerConfiguration, token: String?,
                         inspect: (LiveServer) -> Void = { _ in }) async throws -> (Duration, [Duration]) {
        let server = try await LiveServer.start(directory: directory, configuration: configuration)
        let result = try await writeRun(clients: clients, perClient: perClient, on: server, token: token, inspect: inspect)
        await server.stop()
        return result
    }

    /// `clients` clients of `server` each committing `perClient` writes one at a time into
    /// `collection`, as writer ids starting with `writerPrefix` (a store that outlives the run
    /// needs new ones each run). Returns the time and each write's round trip, sorted.
    static func writeRun(clients: Int, perClient: Int, on server: LiveServer, token: String?, collection: String = "items", writerPrefix: String = "bench-writer",
                         inspect: (LiveServer) -> Void = { _ in }) async throws -> (Duration, [Duration]) {
        let running = (0..<clients).map { client(server, "\(writerPrefix)-\($0)", token: token) }
        for (client, _) in running { await client.waitUntilConnected() }
        let roundTrips = Locked<[Duration]>([])
        let elapsed = try await ContinuousClock().measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, (client, _)) in running.enumerated() {
                    group.addTask {
                        for step in 0..<perClient {
                            let id = step * clients + index
                            let mutation = Mutation.set(try DocumentPath("\(collection)/item-\(id)"), ownedBody(id))
                                .identified(by: MutationID(clientID: "\(writerPrefix)-\(index)", sequence: UInt64(step + 1)))
                            let start = ContinuousClock.now
                            let acknowledgements = try await client.commit([mutation])
                            roundTrips.withLock { $0.append(ContinuousClock.now - start) }
                            precondition(acknowledgements.allSatisfy { $0.status == .applied }, "bench: a write was not applied: \(acknowledgements)")
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let stored = try await server.store.read(.collection(try CollectionPath(collection), Query())).documents.count
        precondition(stored == clients * perClient, "bench: the server holds \(stored) of \(clients * perClient) documents")
        inspect(server)
        for (_, task) in running { task.cancel() }
        return (elapsed, roundTrips.withLock { $0 }.sorted())
    }
}
