import Foundation
import Logging
import PostgresNIO
import TandemCore
import TandemPostgres
import TandemServer
import TandemTesting

/// `tandem bench server --postgres …`: the server's figures on PostgreSQL, beside the same
/// inserts straight into PostgreSQL through postgres-nio and beside the single-node SQLite
/// figures, all in the same run; and the latency from a commit on one node to listeners on another.
enum PostgresBenchmarks {
    /// Runs against the database at `url`, or, when `url` is nil, a private cluster started for
    /// the run (with flushes to disk on, as in production) and deleted after it.
    static func run(url: String?, writes: Int, rounds: Int, latencyCommits: Int = 200, only: String?) async throws -> BenchReport {
        #if os(Linux)
        var cluster: PostgresCluster?
        let databaseURL: String
        if let url {
            databaseURL = url
        } else {
            Console.error("bench: starting a private PostgreSQL cluster")
            let started = try await PostgresCluster.start(flushes: true)
            try await started.createDatabase("bench")
            cluster = started
            databaseURL = started.url(database: "bench")
        }
        do {
            let report = try await measure(url: databaseURL, privateCluster: cluster != nil, writes: writes, rounds: rounds, latencyCommits: latencyCommits, only: only)
            await cluster?.stop()
            return report
        } catch {
            await cluster?.stop()
            throw error
        }
        #else
        guard let url else {
            throw TandemError(.unimplemented, "A private PostgreSQL cluster starts on Linux only; give --postgres a URL.")
        }
        return try await measure(url: url, privateCluster: false, writes: writes, rounds: rounds, latencyCommits: latencyCommits, only: only)
        #endif
    }

    /// Returns once the node of `server` has heard another node (and so wakes it at each commit).
    static func heard(by server: LiveServer) async {
        guard let store = server.store as? PostgresServerStore, !store.otherNodesListening else { return }
        let (heard, hear) = AsyncStream.makeStream(of: Void.self)
        store.otherNodeHeard.withLock { $0 = TestHook { hear.yield() } }
        // Heard between the two looks: the hook was set too late to run.
        if store.otherNodesListening { return }
        for await _ in heard { return }
    }

    static func node(_ url: String) async throws -> LiveServer {
        var configuration = PostgresServerStoreConfiguration()
        configuration.logger.logLevel = .critical
        let store = try await PostgresServerStore.open(url: try PostgresURL(url), configuration: configuration)
        return try await LiveServer.start(store: store)
    }

    private static func measure(url: String, privateCluster: Bool, writes: Int, rounds: Int, latencyCommits: Int, only: String?) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench server --postgres")
        // Names no earlier run used: a database given by URL keeps what each run writes.
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        report.notes.append("postgres: \(privateCluster ? "a private cluster started for the run (fsync on)" : "the database at the given URL; this run's documents are in collections named bench-\(run)-…")")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-postgres-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let a = try await node(url)
        if only == nil || only == "writes" {
            Console.error("bench: writes on PostgreSQL")
            var sqlite: [String] = []
            for (clients, perClient) in [(1, writes), (16, max(1, writes / 8))] {
                // Ours and the baseline in turns, the fastest of `rounds` each: the machine's speed
                // drifts by more than the difference measured.
                var ours = Duration.seconds(Int64.max), baseline = Duration.seconds(Int64.max), rows = Duration.seconds(Int64.max)
                var fastestTrips: [Duration] = []
                for round in 0..<rounds {
                    let (elapsed, roundTrips) = try await ServerBenchmarks.writeRun(clients: clients, perClient: perClient, on: a, token: nil,
                                                                                    collection: "bench-\(run)-writes-\(clients)-\(round)",
                                                                                    writerPrefix: "bench-\(run)-writer-\(clients)-\(round)")
                    if elapsed < ours { (ours, fastestTrips) = (elapsed, roundTrips) }
                    baseline = min(baseline, try await inserts(url: url, table: "tandem_bench_\(run)_\(clients)_\(round)", clients: clients,
                                                               total: clients * perClient, shape: .rowPerStatement))
                    if clients > 1 {
                        rows = min(rows, try await inserts(url: url, table: "tandem_bench_\(run)_\(clients)_rows_\(round)", clients: clients,
                                                           total: clients * perClient, shape: .rowsPerStatement))
                    }
                }
                report.notes.append("postgres: one write's round trip with \(clients) client\(clients == 1 ? "" : "s") (the fastest round): \(ServerBenchmarks.percentiles(fastestTrips))")
                report.add("postgres: acknowledged writes/s, \(clients) client\(clients == 1 ? "" : "s") writing one at a time vs postgres-nio inserting the same documents, \(clients) per transaction (the fastest of \(rounds) rounds each, in turns)",
                           ours: ours, baseline: baseline, operations: clients * perClient, unit: "writes", target: 4)
                if clients > 1 {
                    report.add("postgres: the same, vs postgres-nio inserting \(clients) documents per statement (one round trip per transaction)",
                               ours: ours, baseline: rows, operations: clients * perClient, unit: "writes", target: nil)
                }
                let (onSQLite, _) = try await ServerBenchmarks.writeRun(clients: clients, perClient: perClient, directory: directory.appendingPathComponent("sqlite-writes-\(clients)"),
                                                                        configuration: SyncServerConfiguration(), token: nil)
                sqlite.append("\(clients) client\(clients == 1 ? "" : "s") \(BenchReport.rate(Double(clients * perClient) / onSQLite.doubleSeconds)) writes/s")
            }
            report.notes.append("sqlite, the same writes in the same run (one node, its default store): \(sqlite.joined(separator: ", "))")
        }
        if only == nil || only == "latency" {
            Console.error("bench: commit-to-listener latency on PostgreSQL, one node and across nodes")
            // A second node for the cross-node figures only: following A's commits, it would
            // read each of them, which the write figures (one node's, as on SQLite) leave out.
            let b = try await node(url)
            await heard(by: a)
            // What a second node costs the writes: each commit wakes it, and it reads each.
            var withTwo: [String] = []
            for (clients, perClient) in [(1, writes), (16, max(1, writes / 8))] {
                let (elapsed, _) = try await ServerBenchmarks.writeRun(clients: clients, perClient: perClient, on: a, token: nil,
                                                                       collection: "bench-\(run)-two-nodes-\(clients)", writerPrefix: "bench-\(run)-two-nodes-\(clients)")
                withTwo.append("\(clients) client\(clients == 1 ? "" : "s") \(BenchReport.rate(Double(clients * perClient) / elapsed.doubleSeconds)) writes/s")
            }
            report.notes.append("postgres: the same writes through node A while node B runs (one round each, for information): \(withTwo.joined(separator: ", "))")
            for listeners in [1, 100] {
                let (sameNode, _) = try await ServerBenchmarks.latency(listeners: listeners, commits: latencyCommits, writeTo: a, listenOn: a,
                                                                       collection: "bench-\(run)-latency-\(listeners)")
                report.notes.append("postgres: commit-to-listener latency on one node, \(listeners) listener\(listeners == 1 ? "" : "s"): \(ServerBenchmarks.percentiles(sameNode))")
                let (crossNode, endToEnd) = try await ServerBenchmarks.latency(listeners: listeners, commits: latencyCommits, writeTo: a, listenOn: b,
                                                                               collection: "bench-\(run)-cross-\(listeners)")
                var line = "postgres: cross-node commit-to-listener latency (a commit on node A, listeners on node B), \(listeners) listener\(listeners == 1 ? "" : "s"): \(ServerBenchmarks.percentiles(crossNode)); write-sent-to-listener \(ServerBenchmarks.percentiles(endToEnd))"
                if listeners == 100 {
                    let p50 = crossNode[crossNode.count / 2], p99 = crossNode[crossNode.count * 99 / 100]
                    line += " (target p50 ≤ 3 ms, p99 ≤ 15 ms: \(p50 <= .milliseconds(3) && p99 <= .milliseconds(15) ? "meets" : "MISSES"))"
                }
                report.notes.append(line)
            }
            // Under load: 16 more clients commit through node A without pause all the while.
            let load = 16
            let (loadedSame, _) = try await ServerBenchmarks.latency(listeners: 100, commits: latencyCommits, writeTo: a, listenOn: a,
                                                                     collection: "bench-\(run)-loaded-same", load: load)
            report.notes.append("postgres: commit-to-listener latency on one node, 100 listeners, while \(load) clients commit through it without pause: \(ServerBenchmarks.percentiles(loadedSame))")
            let timings = Locked<[CatchUpTiming]>([])
            (b.store as? PostgresServerStore)?.catchUpTimings.add { timing in timings.withLock { $0.append(timing) } }
            let samples = Locked<[(version: Version, committed: ContinuousClock.Instant, arrived: ContinuousClock.Instant)]>([])
            let (loadedCross, _) = try await ServerBenchmarks.latency(listeners: 100, commits: latencyCommits, writeTo: a, listenOn: b,
                                                                      collection: "bench-\(run)-loaded-cross", load: load) { version, committed, times in
                samples.withLock { $0.append((version, committed, times.sorted()[times.count / 2])) }
            }
            let p50 = loadedCross[loadedCross.count / 2], p99 = loadedCross[min(loadedCross.count - 1, loadedCross.count * 99 / 100)]
            report.notes.append("postgres: cross-node commit-to-listener latency, 100 listeners on node B, while \(load) clients commit through node A without pause: \(ServerBenchmarks.percentiles(loadedCross)) (target p50 ≤ 5 ms, p99 ≤ 25 ms: \(p50 <= .milliseconds(5) && p99 <= .milliseconds(25) ? "meets" : "MISSES"))")
            report.notes.append("postgres: where that time goes (median of each measured commit; the listeners' median arrival): \(Self.breakdown(samples.withLock { $0 }, timings: timings.withLock { $0 }))")
            let (sqlite, _) = try await ServerBenchmarks.latency(listeners: 100, commits: latencyCommits, directory: directory)
            report.notes.append("sqlite, in the same run: commit-to-listener latency on one node, 100 listeners: \(ServerBenchmarks.percentiles(sqlite))")
            await b.stop()
        }
        await a.stop()
        return report
    }

    /// The measured commits' time split by stage: from the commit on node A to node B's wake-up
    /// (the notification), from the wake-up to its catch-up starting (the wait behind the
    /// catch-up under way), the catch-up itself until B's observers were told (a read of the
    /// commit log, unless the notification carried the commit), and from then to the listeners'
    /// median arrival (the fan-out: the hub's pacing, encoding, the socket).
    static func breakdown(_ samples: [(version: Version, committed: ContinuousClock.Instant, arrived: ContinuousClock.Instant)], timings: [CatchUpTiming]) -> String {
        var wake: [Duration] = [], queue: [Duration] = [], tell: [Duration] = [], fanOut: [Duration] = []
        var polled = 0, read = 0
        let ordered = timings.sorted { $0.told < $1.told }
        for sample in samples {
            // The first catch-up that told of the commit.
            guard let timing = ordered.first(where: { $0.through >= sample.version && $0.told >= sample.committed }) else { continue }
            if let woken = timing.woken {
                wake.append(sample.committed.duration(to: woken))
                queue.append(woken.duration(to: timing.started))
            } else {
                polled += 1
            }
            if timing.read { read += 1 }
            tell.append(timing.started.duration(to: timing.told))
            fanOut.append(timing.told.duration(to: sample.arrived))
        }
        func median(_ values: [Duration]) -> String {
            guard !values.isEmpty else { return "-" }
            let sorted = values.sorted()
            return "\(BenchReport.time(sorted[sorted.count / 2].doubleSeconds)) (p99 \(BenchReport.time(sorted[min(sorted.count - 1, sorted.count * 99 / 100)].doubleSeconds)))"
        }
        return "commit to wake-up \(median(wake)), wake-up to catch-up \(median(queue)), catch-up \(median(tell)) (\(read) of \(samples.count) read from the commit log, the rest carried by their notification), fan-out to listeners \(median(fanOut)); \(polled) of \(samples.count) found by a catch-up not woken for them"
    }

    /// How a baseline sends its inserts.
    enum InsertShape {
        /// One INSERT per document, `clients` of them per transaction, as the SQLite figures'
        /// baseline does with GRDB (a transaction of one is the INSERT alone).
        case rowPerStatement
        /// One INSERT of `clients` rows (`unnest` of arrays), each its own transaction: one round
        /// trip per transaction, as the store writes a group commit's documents.
        case rowsPerStatement
    }

    /// A baseline: `total` documents inserted straight into a table like the store's (the same
    /// columns and indexes, the text and its `jsonb`), `clients` per transaction, through
    /// postgres-nio. The table is dropped after.
    static func inserts(url: String, table: String, clients: Int, total: Int, shape: InsertShape) async throws -> Duration {
        let parsed = try PostgresURL(url)
        var logger = Logger(label: "tandem.bench.postgres")
        logger.logLevel = .critical
        let client = PostgresClient(configuration: try parsed.clientConfiguration(connectTimeout: .seconds(10), maximumConnections: 2), backgroundLogger: logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        let create: [String] = [
            """
            CREATE TABLE \(table) (path text PRIMARY KEY, collection text NOT NULL, collection_group text NOT NULL, version bigint NOT NULL,
                create_time bigint NOT NULL, update_time bigint NOT NULL, data text, body jsonb, mutation_client text, mutation_sequence bigint)
            """,
            "CREATE INDEX \(table)_by_collection ON \(table) (collection, version)",
            "CREATE INDEX \(table)_by_group ON \(table) (collection_group, version)",
            "CREATE INDEX \(table)_by_version ON \(table) (version)",
            "CREATE INDEX \(table)_body ON \(table) USING gin (body jsonb_path_ops)",
        ]
        for statement in create {
            try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        // The documents are encoded before the clock starts, as the server's clients encode theirs.
        let texts = (0..<total).map { JSONText.encode(ServerBenchmarks.ownedBody($0)) }
        let elapsed = try await client.withConnection { connection in
            try await ContinuousClock().measure {
                var version: Int64 = 0
                for start in stride(from: 0, to: total, by: clients) {
                    version += 1
                    let batch = start..<min(start + clients, total)
                    switch shape {
                    case .rowPerStatement:
                        if batch.count > 1 { try await connection.query("BEGIN", logger: logger) }
                        for id in batch {
                            var query = PostgresQuery(unsafeSQL: """
                                INSERT INTO \(table) (path, collection, collection_group, version, create_time, update_time, data, body, mutation_client, mutation_sequence)
                                VALUES ($1, 'items', 'items', $2, 0, 0, $3, $3::jsonb, $4, $5)
                                """)
                            query.binds.append("items/item-\(id)")
                            query.binds.append(version)
                            query.binds.append(texts[id])
                            query.binds.append("bench-writer-\(id % clients)")
                            query.binds.append(Int64(id / clients + 1))
                            try await connection.query(query, logger: logger)
                        }
                        if batch.count > 1 { try await connection.query("COMMIT", logger: logger) }
                    case .rowsPerStatement:
                        var query = PostgresQuery(unsafeSQL: """
                            INSERT INTO \(table) (path, collection, collection_group, version, create_time, update_time, data, body, mutation_client, mutation_sequence)
                            SELECT p, 'items', 'items', v, 0, 0, d, d::jsonb, c, s FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS t(p, v, d, c, s)
                            """)
                        query.binds.append(batch.map { "items/item-\($0)" })
                        query.binds.append([Int64](repeating: version, count: batch.count))
                        query.binds.append(batch.map { texts[$0] })
                        query.binds.append(batch.map { "bench-writer-\($0 % clients)" })
                        query.binds.append(batch.map { Int64($0 / clients + 1) })
                        try await connection.query(query, logger: logger)
                    }
                }
            }
        }
        try await client.query(PostgresQuery(unsafeSQL: "DROP TABLE \(table)"), logger: logger)
        return elapsed
    }
}
