import Foundation
import IdentifiedCollections
import Tandem
import TandemCore
import TandemTesting

/// The figures of `tandem bench synced`: synced state against the engine it runs on, in one run.
enum SyncedBenchmarks {
    /// An element of the synced collection.
    struct Task: DocumentIdentifiable {
        var clientId = UUID()
        var documentId: String?
        var title: String
        var done: Bool
        var rank: Int
        var tags: [String: String]
    }

    /// The same document, as an engine's model.
    struct Row: SyncModel {
        var id: String
        var title: String
        var done: Bool
        var rank: Int
        var tags: [String: String]
    }

    static func documents(_ count: Int) throws -> [Document] {
        let tasks = try CollectionPath("tasks")
        return try (0..<count).map { index in
            Document(path: try tasks.document(String(format: "t%06d", index)),
                     data: ["id": .string(String(format: "t%06d", index)), "title": .string("Task \(index)"), "done": false, "rank": .int(index), "tags": ["area": "home"]],
                     version: 1)
        }
    }

    static func run(elements: Int, edits: Int, batch: Int) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench synced")
        let clock = ContinuousClock()

        // One edit: the handle's diff and enqueue, beside the engine's updateDocument of the same
        // field; both offline (the outbox takes it, nothing goes), caches in memory.
        let handleServer = MockServer(documents: try documents(elements))
        let remote = MockRemoteCollectionService(collectionPath: { "tasks" }, store: handleServer)
        let tasks = SyncedCollection(CollectionConfiguration<Task>(collectionPath: "tasks", orderBy: ("rank", true)), remote: remote)
        await tasks.load()
        precondition(tasks.value.count == elements, "bench: the handle holds \(tasks.value.count) of \(elements) elements")
        handleServer.goOffline()
        var synced: [Duration] = []
        var durable: [Duration] = []
        for step in 0..<edits {
            let index = (step &* 7_919) % elements
            var recorded = Duration.zero
            let edit = clock.measure { tasks.withLock { $0[index].done.toggle() } }
            recorded = try await clock.measure { try await tasks.save() }
            synced.append(edit)
            durable.append(edit + recorded)
        }

        let engineServer = MockServer(documents: try documents(elements))
        let engine = CollectionSyncEngine<Row>(remote: MockRemoteCollectionService(collectionPath: { "tasks" }, store: engineServer),
                                               managerKey: "bench-synced-engine", persistence: nil)
        await engine.startListening { $0.order(by: "rank") }
        precondition(engine.currentCollection.count == elements)
        engineServer.goOffline()
        var engineTimes: [Duration] = []
        for step in 0..<edits {
            let index = (step &* 7_919) % elements
            let id = String(format: "t%06d", index)
            let done = !(engine.getDocument(id: id)?.done ?? false)
            engineTimes.append(try await clock.measure { try await engine.updateDocument(id: id, data: ["done": .value(.bool(done))]) })
        }
        let (p50, p99) = percentiles(synced)
        let (engineP50, engineP99) = percentiles(engineTimes)
        let ratio = p50.doubleSeconds / engineP50.doubleSeconds
        let meets = ratio <= 2 && p50 <= .milliseconds(1) && p99 <= .milliseconds(5)
        report.notes.append(String(format: "synced: one edit of a %d-element SyncedCollection (diff and enqueue): p50 %@, p99 %@, beside CollectionSyncEngine.updateDocument of the same field: p50 %@, p99 %@; ratio %.2f× (target p50 ≤ 2× and ≤ 1 ms, p99 ≤ 5 ms: %@)",
                                  elements, BenchReport.time(p50.doubleSeconds), BenchReport.time(p99.doubleSeconds),
                                  BenchReport.time(engineP50.doubleSeconds), BenchReport.time(engineP99.doubleSeconds), ratio, meets ? "meets" : "MISSES"))
        let (durableP50, durableP99) = percentiles(durable)
        report.notes.append("synced: the same edit until it is in the engine's outbox (withLock, then save()): p50 \(BenchReport.time(durableP50.doubleSeconds)), p99 \(BenchReport.time(durableP99.doubleSeconds)) (no target)")

        // A remote batch of `batch` changes applied to the handle (the engine's apply, then the
        // handle taking its view), beside an engine applying the same batch to the same documents.
        let changes = try documents(batch).enumerated().map { offset, document in
            var changed = document
            changed.data["title"] = .string("Task \(offset), renamed")
            changed.version = 1_000_000
            return RemoteChange.upsert(changed)
        }
        let remoteBatch = RemoteChangeBatch(isSnapshot: false, changes: changes, version: 1_000_000)
        let handleApply = clock.measure { tasks.engine.core.applyNow(remoteBatch) }
        precondition(tasks.value.filter { $0.title.hasSuffix("renamed") }.count == batch, "bench: the handle did not take the batch")
        let engineApply = clock.measure { engine.core.applyNow(remoteBatch) }
        precondition(engine.currentCollection.filter { $0.title.hasSuffix("renamed") }.count == batch)
        report.add("synced: a remote batch of \(batch) changes applied to a \(elements)-element SyncedCollection vs the engine applying it",
                   ours: handleApply, baseline: engineApply, operations: batch, unit: "changes", target: nil)
        engine.stopListening()
        return report
    }

    static func percentiles(_ samples: [Duration]) -> (p50: Duration, p99: Duration) {
        let sorted = samples.sorted()
        return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)])
    }
}
