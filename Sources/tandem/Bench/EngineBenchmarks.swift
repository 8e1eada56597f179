import Foundation
import GRDB
import Synchronization
import Tandem
import TandemCore
import TandemTesting

/// The figures of `tandem bench engines`.
enum EngineBenchmarks {
    struct Item: SyncModel {
        var id: String
        var name: String
        var price: Double
        var stock: Int
        var tags: [String]
    }

    static func item(_ index: Int) -> Item {
        Item(id: "item-\(index)", name: "Item number \(index)", price: Double(index % 1_000) / 4, stock: index % 50, tags: ["t\(index % 7)", "bulk"])
    }

    /// Cold start of an engine whose cache holds `count` documents, against a raw GRDB fetch of the
    /// same rows decoded with JSONDecoder. Target: at most 1.2× the baseline's time.
    static func coldStart(count: Int, repetitions: Int, directory: URL, into report: inout BenchReport) throws {
        let persistence = try SQLiteCollectionPersistence(managerKey: "bench", directory: directory)
        _ = try persistence.create(clientID: "bench")
        var change = LocalCollectionChange()
        let collection = try CollectionPath("items")
        change.upserts = try (0..<count).map { index in
            Document(path: try collection.document("item-\(index)"), data: try JSONValueEncoder().encodeObject(item(index)), version: 1)
        }
        try persistence.apply(change)

        let remote = MockRemoteCollectionService(collectionPath: { "items" })
        var loaded = 0
        let ours = try bestTime(repetitions) {
            let engine = CollectionSyncEngine<Item>(
                remote: remote, managerKey: "bench",
                persistence: try SQLiteCollectionPersistence(managerKey: "bench", directory: directory))
            loaded = engine.currentCollection.count
        }
        precondition(loaded == count, "bench: the engine loaded \(loaded) of \(count) documents")

        let pool = try DatabasePool(path: directory.appendingPathComponent("collections.sqlite").path)
        var decoded = 0
        let baseline = try bestTime(repetitions) {
            let decoder = JSONDecoder()
            let items = try pool.read { db in
                try String.fetchAll(db, sql: "SELECT data FROM document WHERE manager_key = ?", arguments: ["bench"]).map {
                    try decoder.decode(Item.self, from: Data($0.utf8))
                }
            }
            decoded = items.count
        }
        precondition(decoded == count)
        report.add("engines: cold start with \(count) cached documents vs GRDB fetch + JSONDecoder",
                   ours: ours, baseline: baseline, operations: count, unit: "documents", target: 1.2)
    }

    /// One remote change applied to an engine holding `count` documents (durably), p50 and p99.
    /// Under a query with an order, each change moves its document to a new place in the view.
    static func remoteChange(count: Int, changes: Int, directory: URL, query: Query = Query()) async throws -> (p50: Duration, p99: Duration) {
        let store = MockServer(documents: try (0..<count).map { index in
            Document(path: try CollectionPath("items").document("item-\(index)"), data: try JSONValueEncoder().encodeObject(item(index)))
        })
        let remote = MockRemoteCollectionService(collectionPath: { "items" }, store: store)
        let engine = CollectionSyncEngine<Item>(
            remote: remote, managerKey: "changes", persistence: try SQLiteCollectionPersistence(managerKey: "changes", directory: directory))
        await engine.startListening { _ in query }
        let shown = engine.currentCollection.count
        precondition(shown > 0)
        // The first snapshot's cache write done, so each sample is one change and its own write.
        engine.core.flushCache()
        let clock = ContinuousClock()
        var samples: [Duration] = []
        for step in 0..<changes {
            var changed = item(step % count)
            changed.stock = 1_000 + step
            changed.price = Double((step * 7_919) % 1_000) / 4
            let document = Document(path: try CollectionPath("items").document(changed.id), data: try JSONValueEncoder().encodeObject(changed),
                                    version: Version(UInt64(10 + step)))
            let batch = RemoteChangeBatch(isSnapshot: false, changes: [.upsert(document)], version: Version(UInt64(10 + step)))
            samples.append(clock.measure { engine.core.applyNow(batch) })
        }
        precondition(engine.currentCollection.count == shown)
        engine.stopListening()
        samples.sort()
        return (samples[samples.count / 2], samples[samples.count * 99 / 100])
    }

    /// Updates queued offline, then flushed to the mocks' server (the real server in process, on a
    /// memory store) once it is back: writes/s.
    static func flush(count: Int) async throws -> (queue: Duration, flush: Duration) {
        let remote = MockRemoteCollectionService(collection: [item(0)], collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "flush", persistence: nil, retryPolicy: .none)
        remote.store.goOffline()
        let clock = ContinuousClock()
        let queue = try await clock.measure {
            for step in 0..<count {
                // Alternate fields and a transform so writes are not all merged into one.
                if step.isMultiple(of: 2) {
                    try await engine.updateDocument(id: "item-0", data: ["stock": .increment(1)])
                } else {
                    try await engine.updateDocument(id: "item-\(step)", data: ["name": "renamed"])
                }
            }
        }
        let queued = engine.pendingWrites.count
        remote.store.goOnline()
        let flush = await clock.measure {
            await engine.startListening()
            // A benchmark may poll; a short sleep keeps the poll from competing with the sender.
            while engine.hasPendingWrites { try? await Task.sleep(for: .milliseconds(1)) }
        }
        _ = queued
        return (queue, flush)
    }
}

extension EngineBenchmarks {
    /// The p99 of reading a 10,000-document `currentCollection` while `writes` persisted writes are
    /// made, beside reading a `Mutex`-held array while the same number of elements are replaced and
    /// as many FULL-synchronous SQLite inserts run outside its lock (the same disk load).
    static func readsWhileWriting(documents: Int, writes: Int, directory: URL) async throws -> (ours: Duration, baseline: Duration) {
        let persistence = try SQLiteCollectionPersistence(managerKey: "reads", directory: directory)
        let items = (0..<documents).map(item)
        let remote = MockRemoteCollectionService(collection: items, collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "reads", persistence: persistence, retryPolicy: .none)
        await engine.startListening()
        precondition(engine.currentCollection.count == documents)
        remote.store.goOffline()  // every write is queued durably; none is answered
        let ours = try await readLatencyP99 {
            _ = engine.currentCollection.count
        } whileWriting: {
            for step in 0..<writes {
                var changed = item(step % documents)
                changed.stock = 5_000 + step
                try await engine.saveDocument(changed)
            }
        }
        engine.stopListening(clearCaches: false)

        let array = Mutex(items)
        let queue = try fullSyncQueue(directory.appendingPathComponent("reads-baseline.sqlite").path)
        let baseline = try await readLatencyP99 {
            _ = array.withLock { $0 }.count
        } whileWriting: {
            for step in 0..<writes {
                var changed = item(step % documents)
                changed.stock = 5_000 + step
                let replacement = changed
                array.withLock { $0[step % documents] = replacement }
                try await queue.write { db in
                    try db.execute(sql: "INSERT INTO item (id, data) VALUES (?, ?)", arguments: ["w\(step)", replacement.name])
                }
            }
        }
        return (ours, baseline)
    }

    /// Reads in a loop on a task of its own while `writing` runs; the p99 of one read.
    static func readLatencyP99(_ read: @escaping @Sendable () -> Void, whileWriting writing: () async throws -> Void) async throws -> Duration {
        let running = Atomic<Bool>(true)
        let reader = Task.detached { () -> [Duration] in
            let clock = ContinuousClock()
            var samples: [Duration] = []
            samples.reserveCapacity(1 << 20)
            while running.load(ordering: .relaxed) {
                let start = clock.now
                read()
                samples.append(clock.now - start)
            }
            return samples
        }
        try await writing()
        running.store(false, ordering: .relaxed)
        var samples = await reader.value
        samples.sort()
        if ProcessInfo.processInfo.environment["TANDEM_BENCH_DETAIL"] != nil {
            print("reads: \(samples.count), p50 \(samples[samples.count / 2]), p90 \(samples[samples.count * 9 / 10]), p99 \(samples[samples.count * 99 / 100]), max \(samples.last!)")
        }
        return samples[samples.count * 99 / 100]
    }

    /// A database queue whose every transaction is fsynced, with a two-column table.
    static func fullSyncQueue(_ path: String) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        try queue.write { db in try db.execute(sql: "CREATE TABLE IF NOT EXISTS item (id TEXT PRIMARY KEY, data TEXT)") }
        return queue
    }

    static func localWrite(directory: URL, into report: inout BenchReport) async throws {
        let (writeOurs, writeBaseline) = try await localWrite(writes: 500, directory: directory)
        report.notes.append("engines: one local write until durably queued: p50 \(BenchReport.time(writeOurs.doubleSeconds)), beside one synchronous = FULL insert through GRDB: p50 \(BenchReport.time(writeBaseline.doubleSeconds)); ratio \(String(format2: writeOurs.doubleSeconds / writeBaseline.doubleSeconds))× (target ≤ 1.2×: \(writeOurs.doubleSeconds <= 1.2 * writeBaseline.doubleSeconds ? "meets" : "MISSES"))")
    }

    /// The p50 of one local write until it is durably queued (the server unreachable), beside the
    /// p50 of one `synchronous = FULL` insert through GRDB: the fsync floor.
    static func localWrite(writes: Int, directory: URL) async throws -> (ours: Duration, baseline: Duration) {
        let persistence = try SQLiteCollectionPersistence(managerKey: "local", directory: directory)
        let remote = MockRemoteCollectionService(collection: [item(0)], collectionPath: { "items" })
        let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "local", persistence: persistence, retryPolicy: .none)
        remote.store.goOffline()
        let clock = ContinuousClock()
        let queue = try fullSyncQueue(directory.appendingPathComponent("local-baseline.sqlite").path)
        var ours: [Duration] = []
        var baseline: [Duration] = []
        // In turns, so both see the same disk and the same machine from one moment to the next.
        for step in 0..<writes {
            var changed = item(step)
            changed.stock = step
            ours.append(try await clock.measure { try await engine.saveDocument(changed) })
            let text = try String(decoding: JSONEncoder().encode(item(step)), as: UTF8.self)
            baseline.append(try clock.measure {
                try queue.write { db in
                    try db.execute(sql: "INSERT INTO item (id, data) VALUES (?, ?)", arguments: ["w\(step)", text])
                }
            })
        }
        ours.sort()
        baseline.sort()
        return (ours[ours.count / 2], baseline[baseline.count / 2])
    }
}

extension EngineBenchmarks {
    static func run(documents: Int, repetitions: Int, coldStartOnly: Bool = false, replayOnly: Bool = false, localWriteOnly: Bool = false, remoteChangeOnly: Bool = false) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench engines")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        if replayOnly {
            try await replay(count: 10_000, directory: directory, into: &report)
            return report
        }
        if localWriteOnly {
            try await localWrite(directory: directory, into: &report)
            return report
        }
        if !remoteChangeOnly {
            try coldStart(count: documents, repetitions: repetitions, directory: directory, into: &report)
            if coldStartOnly { return report }
        }
        let (p50, p99) = try await remoteChange(count: documents, changes: remoteChangeOnly ? 20_000 : 500, directory: directory)
        report.notes.append("engines: one remote change with \(documents) documents cached (persisted): p50 \(BenchReport.time(p50.doubleSeconds)), p99 \(BenchReport.time(p99.doubleSeconds)) (target p50 ≤ 0.05 ms: \(p50 <= .microseconds(50) ? "meets" : "MISSES"))")
        if remoteChangeOnly { return report }
        let ordered = Query().whereField("tags", arrayContains: "bulk").order(by: "price", descending: true)
        let (orderedP50, orderedP99) = try await remoteChange(count: documents, changes: 500, directory: directory, query: ordered)
        report.notes.append("engines: the same under a filtered, ordered query (each change moves its document in the view): p50 \(BenchReport.time(orderedP50.doubleSeconds)), p99 \(BenchReport.time(orderedP99.doubleSeconds)); \(String(format2: orderedP50.doubleSeconds / p50.doubleSeconds))× the p50 above (no target)")
        let (readOurs, readBaseline) = try await readsWhileWriting(documents: min(documents, 10_000), writes: 1_000, directory: directory)
        report.notes.append("engines: reading currentCollection (\(min(documents, 10_000)) documents) while 1,000 persisted writes are made: p99 \(BenchReport.time(readOurs.doubleSeconds)), beside a Mutex-held array under the same disk load: p99 \(BenchReport.time(readBaseline.doubleSeconds)); ratio \(String(format2: readOurs.doubleSeconds / readBaseline.doubleSeconds))× (target ≤ 2×: \(readOurs.doubleSeconds <= 2 * readBaseline.doubleSeconds ? "meets" : "MISSES"))")
        try await localWrite(directory: directory, into: &report)
        try await replay(count: 10_000, directory: directory, into: &report)
        let writes = 10_000
        let (queue, flush) = try await flush(count: writes)
        report.notes.append("engines: \(writes) updates queued offline in \(BenchReport.time(queue.doubleSeconds)) (\(BenchReport.rate(Double(writes) / queue.doubleSeconds)) writes/s), flushed to the server in process (memory store) in \(BenchReport.time(flush.doubleSeconds)) (\(BenchReport.rate(Double(writes) / flush.doubleSeconds)) writes/s)")
        return report
    }
}
