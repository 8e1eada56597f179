import Foundation
import Synchronization
import TandemCore
import TandemServer

extension ServerStoreConformance {
    static var readChecks: [Check] {
        [
            Check("a read's version covers every document it returns, and queries run the one evaluator") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("q/a"), ["n": 1]), .set(path("q/b"), ["n": 2])])
                _ = try await store.commit([.update(path("q/a"), fields: ["n": 3])])
                _ = try await store.commit([.set(path("other/x"), [:])])
                let one = try await store.read(.document(path("q/a")))
                try expectEqual(one.documents.map(\.version), [2], "the document read")
                try expect(one.version >= 2, "a document read at version \(one.version) holds version 2")
                try expectEqual(try await store.read(.document(path("q/none"))).documents, [], "a missing document")
                let query = try await store.read(.collection(collection("q"), Query().order(by: "n", descending: true)))
                try expectEqual(query.documents.map(\.path.id), ["a", "b"], "a query's order")
                try expectEqual(query.version, 3, "a query's version")
                let group = try await store.read(.collectionGroup("q", Query().whereField("n", isLessThan: 3)))
                try expectEqual(group.documents.map(\.path.id), ["b"], "a group query's filter")
                // An or: a store that narrows its reads by the filters keeps what any branch keeps.
                let either = try await store.read(.collection(collection("q"), Query().whereFilter(Filter.orFilter([
                    Filter.whereField("n", isEqualTo: 2),
                    Filter.andFilter([Filter.whereField("n", isGreaterThan: 2), Filter.whereField("n", isLessThan: 10)]),
                ])).order(by: "n", descending: true)))
                try expectEqual(either.documents.map(\.path.id), ["a", "b"], "a query's or")
                let partly = try await store.read(.collectionGroup("q", Query().whereFilter(Filter.orFilter([
                    Filter.whereField("n", isEqualTo: 2), Filter.whereField("n", isNotEqualTo: 2),
                ]))))
                try expectEqual(partly.documents.map(\.path.id), ["a", "b"], "an or with a branch no store can narrow by")
            },
            Check("collections are listed by parent, and groups by name, only while they hold a document") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("users/ada"), [:]), .set(path("users/ada/notes/1"), [:]), .set(path("users/ada/tasks/1"), [:]),
                                            .set(path("users/bob/notes/1"), [:]), .set(path("users/bob/notes/1/tags/x"), [:]),
                                            .set(path("rooms/a"), [:]), .set(path("usersx/z"), [:]), .set(path("Émile/a"), [:]), .set(path("Zed/a"), [:])])
                try expectEqual(try await store.collectionIDs(under: nil), ["Zed", "rooms", "users", "usersx", "Émile"], "the root's collections, in byte order")
                try expectEqual(try await store.collectionIDs(under: path("users/ada")), ["notes", "tasks"], "a document's collections")
                try expectEqual(try await store.collectionIDs(under: path("users/bob")), ["notes"], "a missing document's collections")
                try expectEqual(try await store.collectionIDs(under: path("users/bob/notes/1")), ["tags"], "a nested document's collections")
                try expectEqual(try await store.collectionIDs(under: path("users/carl")), [], "a document with nothing under it")
                try expectEqual(try await store.collectionGroups(), ["Zed", "notes", "rooms", "tags", "tasks", "users", "usersx", "Émile"], "the groups")
                _ = try await store.commit([.delete(path("users/ada/tasks/1")), .delete(path("usersx/z"))])
                try expectEqual(try await store.collectionIDs(under: path("users/ada")), ["notes"], "a collection whose documents were deleted")
                try expectEqual(try await store.collectionIDs(under: nil), ["Zed", "rooms", "users", "Émile"], "the root after deletes")
                try expectEqual(try await store.collectionGroups(), ["Zed", "notes", "rooms", "tags", "users", "Émile"], "the groups after deletes")
            },
            Check("the change feed pages by version, never splitting a commit, and reports deletes and documents leaving a query") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("c/1"), ["x": 1]), .set(path("c/2"), [:]), .set(path("c/3"), [:])])  // v1
                _ = try await store.commit([.set(path("c/4"), [:])])  // v2
                _ = try await store.commit([.delete(path("c/1"))])  // v3
                let first = try await store.changes(since: 0, in: nil, limit: 2)
                try expectEqual(first.changes.map(\.path.id), ["2", "3"], "the first page (c/1 moved on to v3; v1 comes whole)")
                try expectEqual(first.version, 1, "the first page's version")
                try expect(first.hasMore, "the first page says nothing follows")
                let second = try await store.changes(since: first.version, in: nil, limit: 2)
                try expectEqual(second.changes.map(\.path.id), ["4", "1"], "the second page")
                try expect(second.changes.last?.document == nil, "a delete came with a document")
                try expect(!second.hasMore, "the last page says more follows")
                try expectEqual(second.version, 3, "the last page's version")
                let scoped = try await store.changes(since: 0, in: .collection(collection("c"), Query().whereField("x", isEqualTo: 1)), limit: 10)
                try expect(scoped.changes.allSatisfy { $0.document == nil }, "documents outside a query came as themselves")
                try expectEqual(try await store.changes(since: 3, in: nil, limit: 10), ChangePage(changes: [], version: 3, hasMore: false), "changes since the newest version")
            },
            Check("a change feed from beyond the store's version, or from a version other than zero before pruned tombstones, is out-of-range") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("c/1"), [:])])
                _ = try await store.commit([.delete(path("c/1"))])
                try await expectError(.outOfRange, "changes since a version the store never reached") { _ = try await store.changes(since: 99, in: nil, limit: 10) }
                try expectEqual(try await store.pruneTombstones(olderThan: Date().addingTimeInterval(3600)), 1, "the tombstones pruned")
                try await expectError(.outOfRange, "changes since before a pruned tombstone") { _ = try await store.changes(since: 1, in: nil, limit: 10) }
                try expectEqual(try await store.changes(since: 2, in: nil, limit: 10).changes, [], "changes since the pruned tombstone")
                let reopened = try await opened.reopen()
                try await expectError(.outOfRange, "changes since before a pruned tombstone, after a reopen") { _ = try await reopened.changes(since: 1, in: nil, limit: 10) }
            },
            Check("a change feed from zero is served after pruning: what exists now, in pages of their size, each next one served as the same read's (fromStart)") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("p/1"), ["n": 1]), .set(path("p/2"), ["n": 2]), .set(path("p/3"), ["n": 3])])  // v1
                _ = try await store.commit([.set(path("p/4"), ["n": 4])])  // v2
                _ = try await store.commit([.delete(path("p/1"))])  // v3
                _ = try await store.commit([.set(path("p/5"), ["n": 5])])  // v4
                _ = try await store.commit([.set(path("p/6"), ["n": 6])])  // v5
                try expectEqual(try await store.pruneTombstones(olderThan: Date().addingTimeInterval(3600)), 1, "the tombstones pruned")
                let live = ["2", "3", "4", "5", "6"]
                let feeds: [(name: String, target: ListenTarget?)] = [("the whole feed", nil), ("a collection's feed", .collection(collection("p"), Query()))]
                for (name, target) in feeds {
                    let whole = try await store.changes(since: 0, in: target, limit: 100)
                    try expectEqual(whole.changes.map(\.path.id), live, "\(name) from zero, pruned: the documents that exist")
                    try expect(whole.changes.allSatisfy { $0.document != nil }, "\(name) from zero came with a deletion: \(whole.changes)")
                    try expectEqual(whole.version, 5, "\(name) from zero: its version")
                    try expect(!whole.hasMore, "\(name) from zero says more follows")
                    // Pages of one change, each no larger than its limit (a read from zero of a large
                    // store would otherwise be one page); the next pages continue the read.
                    var since = Version.zero
                    var pages: [ChangePage] = []
                    while pages.count < 10 {
                        let page = since == .zero
                            ? try await store.changes(since: since, in: target, limit: 1)
                            : try await store.changes(continuingFromStartAfter: since, in: target, limit: 1)
                        pages.append(page)
                        since = page.version
                        if !page.hasMore { break }
                    }
                    try expect(pages.count == 4 && pages.allSatisfy { Set($0.changes.map(\.version)).count == 1 },
                               "\(name) from zero: pages of one commit each (v1, v2, v4, v5), not \(pages.map { $0.changes.map(\.version.rawValue) })")
                    try expectEqual(pages[0].version, 1, "\(name) from zero: the first page ends with the first commit")
                    try expectEqual(pages.flatMap(\.changes).map(\.path.id), live, "\(name) from zero, a page at a time")
                    try expect(pages.last?.hasMore == false, "\(name) from zero, a page at a time, never ends")
                    try expectEqual(since, 5, "\(name) from zero, a page at a time: the last page's version")
                }
                // The same since, not said to continue a read from zero: tombstones after it were pruned.
                try await expectError(.outOfRange, "changes since a version before the pruned tombstone") { _ = try await store.changes(since: 2, in: nil, limit: 10) }
                try expectEqual(try await store.changes(since: 3, in: nil, limit: 10).changes.map(\.path.id), ["5", "6"], "changes since the pruned tombstone")
                let reopened = try await opened.reopen()
                try expectEqual(try await reopened.changes(since: 0, in: nil, limit: 100).changes.map(\.path.id), live, "the feed from zero, after a reopen")
                try await expectError(.outOfRange, "changes since before the pruned tombstone, after a reopen") { _ = try await reopened.changes(since: 1, in: nil, limit: 10) }
            },
            Check("changes carry the mutation id that made them; the feed and a snapshot agree") { opened in
                let store = opened.store
                _ = try await store.commit([Mutation.set(path("f/a"), ["v": 1]).identified(by: id("phone", 1)), .set(path("f/b"), ["v": 2])])
                let page = try await store.changes(since: 0, in: .collection(collection("f"), Query()), limit: 10)
                try expectEqual(page.changes.map(\.mutationID), [id("phone", 1), nil], "the changes' mutation ids")
                let snapshot = try await store.read(.collection(collection("f"), Query()))
                try expectEqual(page.changes.compactMap(\.document), snapshot.documents, "the feed's documents and a snapshot's")
                try expectEqual(page.version, snapshot.version, "the feed's version and a snapshot's")
            },
            Check("an encoded snapshot, when the store writes one, holds what a read returns") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("e/b"), ["v": 2]), .set(path("e/a"), ["v": 1, "s": "quoted \"x\""]), .set(path("x/e/e/c"), ["v": 3])])
                for target in [ListenTarget.collection(collection("e"), Query()), .collectionGroup("e", Query())] {
                    guard let encoded = try await store.encodedSnapshot(target, groupSize: 1) else { continue }
                    let read = try await store.read(target)
                    try expectEqual(encoded.version, read.version, "the encoded snapshot's version")
                    var changes: [RemoteChange] = []
                    for group in encoded.groups {
                        let text = "{\"changes\":" + String(decoding: group, as: UTF8.self) + ",\"target\":1,\"type\":\"snapshot\",\"version\":\(encoded.version)}"
                        guard case .batch(_, let batch, _, _) = try ServerMessage.parse(text) else { throw ConformanceFailure(message: "not a batch: \(text)", file: #fileID, line: #line) }
                        changes += batch.changes
                    }
                    try expectEqual(changes, read.documents.map(RemoteChange.upsert), "the encoded snapshot of \(target)")
                }
            },
        ]
    }
}
