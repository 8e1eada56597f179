import Foundation
import TandemCore
import TandemServer

extension ServerStoreConformance {
    /// Checks for stores that several instances share (several server nodes over one database):
    /// run them with a subject whose ``OpenedStore/openShared`` opens another instance over the
    /// same data while the first stays open. A store one process owns (SQLite) has none to run.
    public static var sharedChecks: [Check] {
        [
            Check("two instances over one database, written at once: each request applied once at its own version, and both read every write") { opened in
                let (first, second) = (opened.store, try await opened.shared())
                _ = try await first.commit([.set(path("counters/a"), ["n": 0])])
                let results = await withTaskGroup(of: [Result<CommitResult, TandemError>].self) { group in
                    for (index, store) in [first, second, first, second].enumerated() {
                        group.addTask {
                            var results: [Result<CommitResult, TandemError>] = []
                            for n in 0..<25 {
                                let write = increment.identified(by: id("writer\(index)", UInt64(n + 1)))
                                results += await store.commitAll([[write, .set(path("shared/w\(index)-\(n)"), ["n": .int(n)])]])
                            }
                            return results
                        }
                    }
                    var all: [Result<CommitResult, TandemError>] = []
                    for await results in group { all += results }
                    return all
                }
                let versions = try results.map { try $0.get().acknowledgements[0].version }
                try expectEqual(Set(versions).count, 100, "distinct versions of 100 requests")
                try expectEqual(try await first.counter(), 100, "the counter, read through the first")
                try expectEqual(try await second.counter(), 100, "the counter, read through the second")
                for store in [first, second] {
                    try expectEqual(try await store.read(.collection(collection("shared"), Query())).documents.count, 100, "the documents each instance reads")
                    try expect(try await store.currentVersion() >= versions.max()!, "an instance's watermark is below a commit it could read")
                    var since = Version.zero
                    var seen: [Version] = []
                    while true {
                        let page = try await store.changes(since: since, in: .collection(collection("shared"), Query()), limit: 30)
                        seen += page.changes.map(\.version)
                        since = page.version
                        if !page.hasMore { break }
                    }
                    try expectEqual(seen, seen.sorted(), "the feed's order")
                    try expectEqual(Set(seen).count, 100, "the commits the feed lists")
                }
            },
            Check("a mutation decided through one instance is answered as decided through the other, and its writer id is its client's on both") { opened in
                let (first, second) = (opened.store, try await opened.shared())
                _ = try await first.commit([.set(path("counters/a"), ["n": 0])])
                let once = increment.identified(by: id("w", 1))
                let applied = try await first.commit([[once]], limits: ServerLimits(), clientID: "phone")[0].get()
                let replayed = try await second.commit([[once]], limits: ServerLimits(), clientID: "phone")[0].get()
                try expectEqual(replayed.acknowledgements, applied.acknowledgements.map(\.replayed), "the answer through the other instance")
                try expectEqual(try await second.counter(), 1, "the counter")
                let refused = Mutation.update(path("missing/x"), fields: ["v": 1]).identified(by: id("w", 2))
                _ = try await second.commit([[refused]], limits: ServerLimits(), clientID: "phone")
                try await expectError(.notFound, "a refusal answered through the other instance") {
                    _ = try await first.commit([[refused]], limits: ServerLimits(), clientID: "phone")[0].get().refusal.map { throw $0 }
                }
                try await expectError(.permissionDenied, "another client writing under w") {
                    _ = try await first.commit([[increment.identified(by: id("w", 3))]], limits: ServerLimits(), clientID: "laptop")[0].get()
                }
            },
        ]
    }
}
