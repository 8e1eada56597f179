import Synchronization
import Tandem
import TandemCore

/// The figures of `tandem bench core`.
enum CoreBenchmarks {
    struct Profile: Identifiable, Sendable {
        var id: String
        var name: String
        var visits: Int
    }

    /// Updates of held entities in an identity map, against a `Mutex`-guarded dictionary doing the
    /// same replacements. Target: at most 3× the baseline's time.
    static func identityMap(updates: Int, repetitions: Int, into report: inout BenchReport) {
        let entityCount = 10_000
        let ids = (0..<entityCount).map { "user-\($0)" }
        // The same pseudo-random id sequence for both sides.
        var state: UInt64 = 0x5EED
        let order = (0..<updates).map { _ -> Int in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(state >> 33) % entityCount
        }

        let map = IdentityMap()
        let held = try! map.store(entities: ids.map { Profile(id: $0, name: $0, visits: 0) })
        let ours = bestTime(repetitions) {
            for (step, index) in order.enumerated() {
                map.update(Profile.self, id: ids[index]) { $0.visits = step }
            }
        }
        let stores = bestTime(repetitions) {
            for (step, index) in order.enumerated() {
                _ = try? map.store(Profile(id: ids[index], name: ids[index], visits: step))
            }
        }
        withExtendedLifetime(held) {}

        let dictionary = Mutex([String: Profile]())
        dictionary.withLock { table in
            for id in ids { table[id] = Profile(id: id, name: id, visits: 0) }
        }
        let baseline = bestTime(repetitions) {
            for (step, index) in order.enumerated() {
                dictionary.withLock { table in table[ids[index]]?.visits = step }
            }
        }
        let baselineStores = bestTime(repetitions) {
            for (step, index) in order.enumerated() {
                let profile = Profile(id: ids[index], name: ids[index], visits: step)
                dictionary.withLock { table in table[profile.id] = profile }
            }
        }
        report.add("identity map: update(_:id:) of \(entityCount) held entities vs Mutex<[String: T]>",
                   ours: ours, baseline: baseline, operations: updates, unit: "updates", target: 3)
        // `store` also makes the EntityObserver it returns (an allocation and an atomic hold), which
        // a dictionary assignment does not: shown for information.
        report.add("identity map: store(_:) replacing held entities, returning an observer, vs Mutex<[String: T]>",
                   ours: stores, baseline: baselineStores, operations: updates, unit: "stores", target: nil)
    }

    /// A filter + order + limit query over many documents, against a hand-written closure filter
    /// and sort. Target: at most 2× the baseline's time.
    static func query(documents count: Int, repetitions: Int, into report: inout BenchReport) throws {
        var state: UInt64 = 0xD0C5
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        let collection = try CollectionPath("people")
        let documents = try (0..<count).map { index in
            Document(path: try collection.document("p\(index)"), data: [
                "age": .int(Int(next() % 100)),
                "score": .double(Double(next() % 1_000_000) / 100),
                "name": .string("person \(index)"),
            ])
        }
        let query = Query().whereField("age", isGreaterThanOrEqualTo: 30).order(by: "score", descending: true).limit(to: 100)

        var ourResult: [Document] = []
        let ours = try bestTime(repetitions) {
            ourResult = try query.evaluate(documents)
        }
        var baselineResult: [Document] = []
        let baseline = bestTime(repetitions) {
            baselineResult = Array(documents
                .filter { if case .int(let age)? = $0.data["age"] { return age >= 30 } else { return false } }
                .sorted { ($0.data["score"]?.doubleValue ?? 0) > ($1.data["score"]?.doubleValue ?? 0) }
                .prefix(100))
        }
        // Both must agree on the scores they return, or the comparison means nothing.
        precondition(ourResult.map { $0.data["score"] } == baselineResult.map { $0.data["score"] }, "bench: results differ")
        report.add("query: filter + order + limit(100) over \(count) documents vs closure filter + sort",
                   ours: ours, baseline: baseline, operations: count, unit: "documents", target: 2)
    }
}
