import Foundation
import Logging
import Observation
import Tandem
import TandemCore
import TandemServer
import TandemTesting

extension EngineBenchmarks {
    /// Offline replay: an engine restarted with `count` writes queued in its SQLite outbox (loaded
    /// before the clock starts) sends them to a real server on 127.0.0.1 until every one is
    /// acknowledged (and its outbox and cache updated on disk), beside the same writes sent by a `TandemClient` with `commit` in
    /// atomic batches of 500, one after another. Target: at most 1.2× the baseline's time.
    static func replay(count: Int, directory: URL, into report: inout BenchReport) async throws {
        // The per-connection write rate (5,000 a second by default) would be the figure otherwise.
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumWritesPerSecond = 10_000_000
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("replay-server"), configuration: configuration)
        var clientConfiguration = TandemClientConfiguration()
        clientConfiguration.clientID = "bench-replay"
        clientConfiguration.logger.logLevel = .critical
        let client = TandemClient(url: server.url, configuration: clientConfiguration)
        let running = Task { try await client.run() }
        await client.waitUntilConnected()

        // The outbox a run of the app left behind: `count` saves of distinct documents.
        let persistence = try SQLiteCollectionPersistence(managerKey: "replay", directory: directory)
        let state = try persistence.create(clientID: "bench-replay-outbox")
        var outbox = state.outbox
        let collection = try CollectionPath("replay")
        for index in 0..<count {
            _ = outbox.enqueue(.set(try collection.document("item-\(index)"), try JSONValueEncoder().encodeObject(item(index))))
        }
        var change = LocalCollectionChange()
        change.outboxPuts = Array(outbox.entries)
        change.nextSequence = outbox.nextSequence
        try persistence.apply(change)

        let clock = ContinuousClock()
        // Made (its outbox loaded) before the clock starts: nothing is sent before a listener
        // starts or a write is made, and loading is the cold start's figure.
        var engine: CollectionSyncEngine<Item>?
        let load = try clock.measure {
            engine = CollectionSyncEngine<Item>(
                remote: TandemRemoteCollectionService(client: client, collection: collection), managerKey: "replay",
                persistence: try SQLiteCollectionPersistence(managerKey: "replay", directory: directory))
        }
        let replaying = engine!
        precondition(replaying.pendingWrites.count == count)
        let ours = await clock.measure {
            // An app starts listening when it starts; this query matches nothing, so the figure is the replay's.
            await replaying.startListening { $0.whereField("name", isEqualTo: "none") }
            await drained(replaying)
            // Until the outbox and the cache are updated on disk too: what the engine leaves to
            // its background writer would otherwise run during the baseline's turn.
            replaying.core.flushCache()
        }
        replaying.stopListening()
        // The baseline on a server and a client of its own: what the first server still does for
        // the replay's writes after acknowledging them (its SQLite file's checkpoints among it)
        // would otherwise run during the baseline's turn.
        let baselineServer = try await LiveServer.start(directory: directory.appendingPathComponent("replay-baseline-server"), configuration: configuration)
        let baselineClient = TandemClient(url: baselineServer.url, configuration: clientConfiguration)
        let baselineRunning = Task { try await baselineClient.run() }
        await baselineClient.waitUntilConnected()
        let baselineCollection = try CollectionPath("replay-baseline")
        let mutations = try (0..<count).map { index in
            Mutation.set(try baselineCollection.document("item-\(index)"), try JSONValueEncoder().encodeObject(item(index)))
                .identified(by: MutationID(clientID: "bench-replay-baseline", sequence: UInt64(index + 1)))
        }
        let baseline = try await clock.measure {
            var start = 0
            while start < count {
                let end = min(start + 500, count)
                _ = try await baselineClient.commit(Array(mutations[start..<end]))
                start = end
            }
        }
        if ProcessInfo.processInfo.environment["TANDEM_BENCH_DETAIL"] != nil {
            let rawCollection = try CollectionPath("replay-raw")
            let raw = try (0..<count).map { index in
                Mutation.set(try rawCollection.document("item-\(index)"), try JSONValueEncoder().encodeObject(item(index)))
                    .identified(by: MutationID(clientID: "bench-replay-raw", sequence: UInt64(index + 1)))
            }
            let rawTime = await clock.measure {
                var start = 0
                while start < count {
                    var window: [WriteRequest] = []
                    while window.count < 4, start < count {
                        let end = min(start + 500, count)
                        window.append(WriteRequest(Array(raw[start..<end]), isAtomic: false))
                        start = end
                    }
                    _ = await baselineClient.commit(requests: window)
                }
            }
            report.notes.append("engines: the same writes through TandemClient.commit(requests:), 4 requests of 500 decided one by one at a time: \(BenchReport.time(rawTime.doubleSeconds))")
        }
        for (store, path) in [(server.store, collection), (baselineServer.store, baselineCollection)] {
            let stored = try await store.read(.collection(path, Query())).documents.count
            precondition(stored == count, "bench: the server holds \(stored) of \(count) documents in \(path)")
        }
        running.cancel()
        baselineRunning.cancel()
        _ = try? await running.value
        _ = try? await baselineRunning.value
        await server.stop()
        await baselineServer.stop()
        report.notes.append("engines: loading the engine with \(count) queued writes before the replay: \(BenchReport.time(load.doubleSeconds))")
        report.add("engines: offline replay of \(count) queued writes to a real server on 127.0.0.1 vs TandemClient.commit in batches of 500 (per-connection rate limit lifted)",
                   ours: ours, baseline: baseline, operations: count, unit: "writes", target: 1.2)
    }

    /// Returns once the engine has no pending write, woken by its observed changes.
    private static func drained<T>(_ engine: CollectionSyncEngine<T>) async {
        let (changes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        defer { continuation.finish() }
        var iterator = changes.makeAsyncIterator()
        // The tracking is installed once the read returns: read again after it, lest a change in
        // between go unseen.
        while withObservationTracking({ engine.hasPendingWrites }, onChange: { continuation.yield() }) && engine.hasPendingWrites {
            _ = await iterator.next()
        }
    }
}
