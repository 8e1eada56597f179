import Foundation
import GRDB
import Hummingbird
import HummingbirdWebSocket
import Logging
import Synchronization
import Tandem
import TandemCore
import TandemServer
import TandemTesting
import WSClient

/// The figures of `tandem bench server`: a real server on loopback, real WebSocket clients.
enum ServerBenchmarks {
    static func client(_ server: LiveServer, _ id: String, token: String? = nil) -> (TandemClient, Task<Void, any Error>) {
        var configuration = TandemClientConfiguration()
        configuration.clientID = id
        configuration.token = token
        configuration.logger.logLevel = .critical
        let client = TandemClient(url: server.url, configuration: configuration)
        return (client, Task { try await client.run() })
    }

    static func body(_ index: Int) -> JSONObject {
        ["name": .string("Item number \(index)"), "price": .double(Double(index % 1_000) / 4), "stock": .int(index % 50), "tags": ["bulk"]]
    }

    /// ``body(_:)`` with an owner, which the access part's rules read.
    static func ownedBody(_ index: Int) -> JSONObject {
        var body = body(index)
        body["owner"] = "bench"
        return body
    }

    // MARK: Writes

    /// Acknowledged writes/s with `clients` clients each committing one write at a time, against GRDB
    /// inserting the same documents into a table like the server's, `clients` per transaction, with
    /// the same durability (WAL, synchronous FULL). Each transaction of the baseline holds the
    /// documents the clients write at the same step (client `c` writes `step * clients + c`).
    static func writes(clients: Int, perClient: Int, directory: URL, into report: inout BenchReport) async throws {
        let clock = ContinuousClock()
        var perTransaction = 0.0
        let (ours, roundTrips) = try await writeRun(clients: clients, perClient: perClient, directory: directory.appendingPathComponent("writes-\(clients)"),
                                                    configuration: SyncServerConfiguration(), token: nil) { server in
            perTransaction = (server.store as? SQLiteServerStore)?.requestsPerTransaction ?? 0
        }
        report.notes.append("server: one write's round trip with \(clients) client\(clients == 1 ? "" : "s"): \(percentiles(roundTrips)); \(String(format2: perTransaction)) writes per transaction")
        let total = clients * perClient

        let pool = try DatabasePool(path: directory.appendingPathComponent("baseline-\(clients).sqlite").path)
        try await pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        try await pool.write { db in
            try db.execute(sql: "CREATE TABLE documents (path TEXT PRIMARY KEY NOT NULL, collection TEXT NOT NULL, version INTEGER NOT NULL, update_time INTEGER NOT NULL, data TEXT) WITHOUT ROWID")
        }
        let baseline = try await clock.measure {
            var version = 0
            for start in stride(from: 0, to: total, by: clients) {
                version += 1
                let batch = start..<min(start + clients, total)
                let stamp = version
                try await pool.write { db in
                    for id in batch {
                        try db.execute(sql: "INSERT OR REPLACE INTO documents VALUES (?, 'items', ?, ?, ?)",
                                       arguments: ["items/item-\(id)", stamp, 0, JSONText.encode(ownedBody(id))])
                    }
                }
            }
        }
        report.add("server: acknowledged writes/s, \(clients) client\(clients == 1 ? "" : "s") writing one at a time vs GRDB inserts \(clients) per transaction",
                   ours: ours, baseline: baseline, operations: total, unit: "writes", target: 4)
    }

    // MARK: Latency

    /// Commit-to-listener latency with `listeners` listeners, spread over at most 20 connections.
    static func latency(listeners: Int, commits: Int, directory: URL, configuration: SyncServerConfiguration = SyncServerConfiguration(),
                        token: String? = nil, query: Query = Query(), body: JSONObject = [:]) async throws -> (commitToListener: [Duration], endToEnd: [Duration]) {
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("latency-\(listeners)-\(UUID().uuidString)"), configuration: configuration)
        let result = try await latency(listeners: listeners, commits: commits, writeTo: server, listenOn: server, token: token, query: query, body: body)
        await server.stop()
        return result
    }

    /// Commit-to-listener latency with `listeners` listeners of `listenOn`, spread over at most 20
    /// connections, to commits written through `writeTo` (the same server, or another node on the
    /// same store): from when `writeTo`'s store has committed to when each listener has the batch.
    ///
    /// With `load`, that many more clients commit through `writeTo` all the while, one write after
    /// another each, to another collection; `sample` is told each measured commit's version, when
    /// its store committed it, and when each listener had it.
    static func latency(listeners: Int, commits: Int, writeTo: LiveServer, listenOn: LiveServer, token: String? = nil, query: Query = Query(),
                        body: JSONObject = [:], collection name: String = "latency", load: Int = 0,
                        sample: (@Sendable (Version, ContinuousClock.Instant, [ContinuousClock.Instant]) -> Void)? = nil) async throws -> (commitToListener: [Duration], endToEnd: [Duration]) {
        let clock = ContinuousClock()
        let published = Locked<[Version: ContinuousClock.Instant]>([:])
        writeTo.store.observeCommits { notice in
            let now = ContinuousClock.now
            published.withLock { published in
                for batch in notice.batches { published[batch.version] = now }
            }
        }
        let connections = min(listeners, 20)
        let clients = (0..<connections).map { client(listenOn, "bench-listener-\($0)", token: token) }
        for (client, _) in clients { await client.waitUntilConnected() }
        let arrivals = Arrivals()
        let ready = Locked(0)
        let collection = try CollectionPath(name)
        var listening: [Task<Void, any Error>] = []
        for index in 0..<listeners {
            let (client, _) = clients[index % connections]
            listening.append(Task {
                for try await batch in client.listen(.collection(collection, query)) {
                    let now = ContinuousClock.now
                    if batch.isSnapshot {
                        ready.withLock { $0 += 1 }
                    } else {
                        arrivals.record(batch.version, at: now)
                    }
                }
            })
        }
        while ready.withLock({ $0 }) < listeners { try await Task.sleep(for: .milliseconds(1)) }
        let (writer, writerTask) = client(writeTo, "bench-latency-writer", token: token)
        await writer.waitUntilConnected()
        // Users' writes do not wait for each other: the load commits while the measure runs.
        let loading = Locked(true)
        var loaders: [Task<Void, any Error>] = []
        for index in 0..<load {
            let (loader, loaderTask) = client(writeTo, "bench-\(name)-load-\(index)", token: token)
            await loader.waitUntilConnected()
            let target = try CollectionPath("\(name)-load")
            loaders.append(Task {
                defer { loaderTask.cancel() }
                var step = 0
                while loading.withLock({ $0 }) {
                    _ = try await loader.commit([.set(try target.document("doc-\(index)-\(step % 10)"), ["step": .int(step)])])
                    step += 1
                }
            })
        }
        var commitToListener: [Duration] = []
        var endToEnd: [Duration] = []
        for step in 0..<commits {
            let sent = clock.now
            var data = body
            data["step"] = .int(step)
            let acknowledgements = try await writer.commit([.set(try collection.document("doc-\(step % 10)"), data)])
            let version = acknowledgements[0].version
            // Woken by the last listener to get this commit (polling would take a core from them).
            let times = await arrivals.wait(for: version, count: listeners)
            let committed = published.withLock { $0[version]! }
            commitToListener += times.map { committed.duration(to: $0) }
            endToEnd += times.map { sent.duration(to: $0) }
            sample?(version, committed, times)
        }
        loading.withLock { $0 = false }
        for loader in loaders { _ = try? await loader.value }
        listening.forEach { $0.cancel() }
        writerTask.cancel()
        for (_, task) in clients { task.cancel() }
        return (commitToListener.sorted(), endToEnd.sorted())
    }

    /// WebSocket echo round trips on the same loopback: the floor any push can reach.
    static func echo(roundTrips: Int) async throws -> [Duration] {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws("/echo") { inbound, outbound, _ in
            for try await message in inbound.messages(maxSize: 1 << 20) {
                if case .text(let text) = message { try await outbound.writeTextMessage(text) }
            }
        }
        var logger = Logger(label: "echo")
        logger.logLevel = .critical
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(router: router, server: .http1WebSocketUpgrade(webSocketRouter: router),
                              configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { portContinuation.yield($0.localAddress?.port ?? 0) }, logger: logger)
        let serverTask = Task { try await app.run() }
        var portIterator = ports.makeAsyncIterator()
        let port = await portIterator.next() ?? 0
        let samples = Locked<[Duration]>([])
        let payload = ServerMessage.batch(target: 1, batch: RemoteChangeBatch(isSnapshot: false, changes: [], version: 1), reset: false, more: false).text
        let client = WebSocketClient(url: "ws://127.0.0.1:\(port)/echo", logger: logger) { inbound, outbound, _ in
            var iterator = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            for _ in 0..<roundTrips {
                let start = ContinuousClock.now
                try await outbound.writeTextMessage(payload)
                _ = try await iterator.next()
                let elapsed = ContinuousClock.now - start
                samples.withLock { $0.append(elapsed) }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        try await client.run()
        serverTask.cancel()
        return samples.withLock { $0 }.sorted()
    }

    // MARK: Initial sync

    /// A CollectionSyncEngine with a SQLite cache syncing a `count`-document collection from the
    /// server, against GRDB inserting the same documents into a fresh file in one transaction.
    static func initialSync(count: Int, directory: URL, into report: inout BenchReport) async throws {
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("sync-server"))
        let collection = try CollectionPath("catalog")
        for start in stride(from: 0, to: count, by: 500) {
            _ = try await server.store.commit(try (start..<min(start + 500, count)).map { .set(try collection.document("item-\($0)"), body($0)) })
        }
        let (tandemClient, task) = client(server, "bench-sync")
        await tandemClient.waitUntilConnected()
        typealias Item = EngineBenchmarks.Item
        let clock = ContinuousClock()
        // Where the time goes, for information: the store's read, and the same read over the wire.
        let storeRead = try await clock.measure { _ = try await server.store.read(.collection(collection, Query())) }
        let encodedRead = try await clock.measure { _ = try await server.store.encodedSnapshot(.collection(collection, Query()), groupSize: 500) }
        var fetched: [Document] = []
        let wireRead = try await clock.measure { fetched = try await tandemClient.documents(.collection(collection, Query())) }
        let offline = CollectionSyncEngine<Item>(
            remote: TandemRemoteCollectionService(client: tandemClient, collection: collection), managerKey: "catalog-apply",
            persistence: try SQLiteCollectionPersistence(managerKey: "catalog-apply", directory: directory.appendingPathComponent("sync-apply")))
        let snapshot = RemoteChangeBatch(isSnapshot: true, changes: fetched.map(RemoteChange.upsert), version: 1)
        let apply = clock.measure { offline.core.applyNow(snapshot) }
        report.notes.append("server: where the time goes: the store writing the \(count) documents as snapshot frames takes \(BenchReport.time(encodedRead.doubleSeconds)) (reading them as values, as a filtered query does, \(BenchReport.time(storeRead.doubleSeconds))); a one-off query of them through the client (read, encode, loopback, parse) \(BenchReport.time(wireRead.doubleSeconds)); applying them to an engine with a SQLite cache as one snapshot already in memory \(BenchReport.time(apply.doubleSeconds)). A listener's snapshot instead arrives in frames the engine decodes and stages in its cache as they come, so all of this overlaps.")
        var synced = 0
        let ours = try await clock.measure {
            let engine = CollectionSyncEngine<Item>(
                remote: TandemRemoteCollectionService(client: tandemClient, collection: collection), managerKey: "catalog",
                persistence: try SQLiteCollectionPersistence(managerKey: "catalog", directory: directory.appendingPathComponent("sync-client")))
            await engine.startListening()
            synced = engine.currentCollection.count
        }
        precondition(synced == count, "bench: the engine synced \(synced) of \(count) documents")
        let cached = try SQLiteCollectionPersistence(managerKey: "catalog", directory: directory.appendingPathComponent("sync-client")).load()?.documents.count
        precondition(cached == count, "bench: the engine's cache holds \(cached ?? 0) of \(count) documents")
        task.cancel()
        await server.stop()

        let pool = try DatabasePool(path: directory.appendingPathComponent("sync-baseline.sqlite").path)
        let baseline = try await clock.measure {
            try await pool.write { db in
                try db.execute(sql: "CREATE TABLE document (path TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL) WITHOUT ROWID")
                for index in 0..<count {
                    try db.execute(sql: "INSERT INTO document VALUES (?, 1, ?)", arguments: ["catalog/item-\(index)", JSONText.encode(body(index))])
                }
            }
        }
        report.add("server: initial sync of \(count) documents into a client's SQLite cache vs GRDB inserting them into a fresh file",
                   ours: ours, baseline: baseline, operations: count, unit: "documents", target: nil)
        let rate = Double(count) / ours.doubleSeconds
        report.notes.append("server: initial sync ran at \(BenchReport.rate(rate)) documents/s (target ≥ 100k documents/s: \(rate >= 100_000 ? "meets" : "MISSES"))")
    }

    static func percentiles(_ samples: [Duration]) -> String {
        guard !samples.isEmpty else { return "no samples" }
        let p50 = samples[samples.count / 2]
        let p99 = samples[min(samples.count - 1, samples.count * 99 / 100)]
        return "p50 \(BenchReport.time(p50.doubleSeconds)), p99 \(BenchReport.time(p99.doubleSeconds))"
    }

    static func run(documents: Int, writes: Int, connections: Int, only: String?, auth: Bool = false) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench server\(auth ? " --auth" : "")")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-server-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        if auth {
            try await accessCost(writes: writes, directory: directory, into: &report)
            return report
        }

        if only == nil || only == "writes" {
            Console.error("bench: writes")
            try await Self.writes(clients: 1, perClient: writes, directory: directory, into: &report)
            try await Self.writes(clients: 16, perClient: max(1, writes / 8), directory: directory, into: &report)
            Console.error("bench: pipelined writes")
            try await pipelinedWrites(count: writes, window: 100, directory: directory, into: &report)
        }
        if only == nil || only == "fanout" {
            Console.error("bench: writes while 1,000 listeners receive them")
            try await writesUnderFanOut(clients: 16, perClient: max(1, writes / 4), listeners: 1_000, directory: directory, into: &report)
        }
        if only == nil || only == "latency" {
            Console.error("bench: commit-to-listener latency")
            try await latencies(into: &report, directory: directory)
        }
        if only == nil || only == "sync" {
            Console.error("bench: initial sync")
            try await initialSync(count: documents, directory: directory, into: &report)
        }
        if only == nil || only == "connections" {
            Console.error("bench: memory per connection")
            try await connectionMemory(connections: connections, cycles: 5, directory: directory, into: &report)
        }
        return report
    }

    static func latencies(into report: inout BenchReport, directory: URL) async throws {
        let echo = try await echo(roundTrips: 2_000)
        report.notes.append("baseline: WebSocket echo round trip on loopback: \(percentiles(echo))")
        for (listeners, commits) in [(1, 500), (100, 200), (1_000, 120)] {
            let (commitToListener, endToEnd) = try await latency(listeners: listeners, commits: commits, directory: directory)
            var line = "server: commit-to-listener latency, \(listeners) listener\(listeners == 1 ? "" : "s"): \(percentiles(commitToListener)); write-sent-to-listener \(percentiles(endToEnd))"
            let p50 = commitToListener[commitToListener.count / 2], p99 = commitToListener[commitToListener.count * 99 / 100]
            if listeners == 100 {
                line += " (target p50 ≤ 1 ms, p99 ≤ 5 ms: \(p50 <= .milliseconds(1) && p99 <= .milliseconds(5) ? "meets" : "MISSES"))"
            } else if listeners == 1_000 {
                line += " (target p99 ≤ 5 ms: \(p99 <= .milliseconds(5) ? "meets" : "MISSES"))"
            }
            report.notes.append(line)
        }
    }
}

/// When each listener got each commit; one waiter at a time is woken once a commit reached them all.
final class Arrivals: Sendable {
    private struct State {
        var times: [Version: [ContinuousClock.Instant]] = [:]
        var waiter: (version: Version, count: Int, continuation: CheckedContinuation<[ContinuousClock.Instant], Never>)?
    }

    private let state = Mutex(State())

    func record(_ version: Version, at instant: ContinuousClock.Instant) {
        let woken = state.withLock { state -> (CheckedContinuation<[ContinuousClock.Instant], Never>, [ContinuousClock.Instant])? in
            state.times[version, default: []].append(instant)
            guard let waiter = state.waiter, waiter.version == version, state.times[version]!.count >= waiter.count else { return nil }
            state.waiter = nil
            return (waiter.continuation, state.times.removeValue(forKey: version)!)
        }
        if let (continuation, times) = woken { continuation.resume(returning: times) }
    }

    /// The arrival times of `version` once `count` listeners have it.
    func wait(for version: Version, count: Int) async -> [ContinuousClock.Instant] {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> [ContinuousClock.Instant]? in
                if let times = state.times[version], times.count >= count {
                    return state.times.removeValue(forKey: version)!
                }
                state.waiter = (version, count, continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

