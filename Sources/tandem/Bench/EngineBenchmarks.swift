import Foundation
import GRDB
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
    /// same rows decoded with JSONDecoder. Target: at most 1.5× the baseline's time.
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
                   ours: ours, baseline: baseline, operations: count, unit: "documents", target: 1.5)
    }

    /// One remote change applied to an engine holding `count` documents (durably), p50 and p99.
    static func remoteChange(count: Int, changes: Int, directory: URL) async throws -> (p50: Duration, p99: Duration) {
        let store = InMemoryDocumentStore(documents: try (0..<count).map { index in
            Document(path: try CollectionPath("items").document("item-\(index)"), data: try JSONValueEncoder().encodeObject(item(index)))
        })
        let remote = MockRemoteCollectionService(collectionPath: { "items" }, store: store)
        let engine = CollectionSyncEngine<Item>(
            remote: remote, managerKey: "changes", persistence: try SQLiteCollectionPersistence(managerKey: "changes", directory: directory))
        await engine.startListening()
        precondition(engine.currentCollection.count == count)
        let clock = ContinuousClock()
        var samples: [Duration] = []
        for step in 0..<changes {
            var changed = item(step % count)
            changed.stock = 1_000 + step
            let document = Document(path: try CollectionPath("items").document(changed.id), data: try JSONValueEncoder().encodeObject(changed),
                                    version: Version(UInt64(10 + step)))
            let batch = RemoteChangeBatch(isSnapshot: false, changes: [.upsert(document)], version: Version(UInt64(10 + step)))
            samples.append(clock.measure { engine.core.apply(batch) })
        }
        engine.stopListening(clearCaches: false)
        samples.sort()
        return (samples[samples.count / 2], samples[samples.count * 99 / 100])
    }

    /// Updates queued offline, then flushed to the in-memory server once it is back: writes/s.
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
    static func run(documents: Int, repetitions: Int, coldStartOnly: Bool = false) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench engines")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try coldStart(count: documents, repetitions: repetitions, directory: directory, into: &report)
        if coldStartOnly { return report }
        let (p50, p99) = try await remoteChange(count: documents, changes: 500, directory: directory)
        report.notes.append("engines: one remote change with \(documents) documents cached (persisted): p50 \(BenchReport.time(p50.doubleSeconds)), p99 \(BenchReport.time(p99.doubleSeconds)) (target p50 ≤ 1 ms: \(p50 <= .milliseconds(1) ? "meets" : "MISSES"))")
        let writes = 10_000
        let (queue, flush) = try await flush(count: writes)
        report.notes.append("engines: \(writes) updates queued offline in \(BenchReport.time(queue.doubleSeconds)) (\(BenchReport.rate(Double(writes) / queue.doubleSeconds)) writes/s), flushed to the in-memory server in \(BenchReport.time(flush.doubleSeconds)) (\(BenchReport.rate(Double(writes) / flush.doubleSeconds)) writes/s)")
        return report
    }
}
