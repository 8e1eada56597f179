import Foundation
import Synchronization
import TandemCore
import TandemServer

extension ServerStoreConformance {
    static var writeChecks: [Check] {
        [
            Check("each applied request gets the next version; documents keep their create time") { opened in
                let store = opened.store
                let first = try await store.commit([.set(path("users/ada"), ["name": "Ada"]), .set(path("users/bob"), ["name": "Bob"])])
                try expectEqual(first.batch?.version, 1, "the first commit's version")
                try expectEqual(first.acknowledgements.map(\.version), [1, 1], "its answers' versions")
                try expectEqual(first.acknowledgements.map(\.status), [.applied, .applied], "its answers' statuses")
                let second = try await store.commit([.update(path("users/ada"), fields: ["age": 36])])
                try expectEqual(second.batch?.version, 2, "the second commit's version")
                guard let ada = try await store.document(at: path("users/ada")) else { throw ConformanceFailure(message: "users/ada is missing", file: #fileID, line: #line) }
                try expectEqual(ada.data, ["name": "Ada", "age": 36], "the updated document")
                try expectEqual(ada.version, 2, "the updated document's version")
                try expect(ada.createTime <= ada.updateTime, "create time \(ada.createTime) after update time \(ada.updateTime)")
                try expectEqual(try await store.currentVersion(), 2, "the watermark")
            },
            Check("a request with one refused write writes nothing and takes no version") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("a/1"), ["v": 1])])
                try await expectError(.failedPrecondition, "a batch with a failed precondition") {
                    _ = try await store.commit([.set(path("a/2"), ["v": 2]), Mutation.set(path("a/1"), ["v": 9]).requiring(.version(99))])
                }
                try await expectError(.notFound, "an update of a missing document") {
                    _ = try await store.commit([.set(path("a/3"), ["v": 3]), .update(path("a/none"), fields: ["v": 1])])
                }
                let written = try await [store.document(at: path("a/2")), store.document(at: path("a/3"))]
                try expect(written == [nil, nil], "a refused batch wrote a document")
                try expectEqual(try await store.document(at: path("a/1"))?.data, ["v": 1], "the document a refused batch would have changed")
                try expectEqual(try await store.currentVersion(), 1, "the watermark after refusals")
                let next = try await store.commit([.set(path("a/4"), [:])])
                try expectEqual(next.batch?.version, 2, "the version after refusals")
            },
            Check("an authorizer sees each write's document before and after; its refusal refuses the request, recorded for its ids") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("rooms/r1"), ["owner": "ada", "n": 1])])
                let seen = Mutex<[String]>([])
                // Only ada's documents, as they are and as the write leaves them.
                let authorizer = WriteAuthorizer { path, before, after in
                    seen.withLock { $0.append("\(path) \(before?.data["owner"]?.stringValue ?? "-")>\(after?.data["owner"]?.stringValue ?? "-")") }
                    let owners = [before, after].compactMap { $0?.data["owner"] }
                    return owners.allSatisfy({ $0 == "ada" }) ? nil : TandemError(.permissionDenied, "not ada's")
                }
                let allowed = await store.commit([[.update(path("rooms/r1"), fields: ["n": 2]), .set(path("rooms/r2"), ["owner": "ada"])]],
                                                 limits: ServerLimits(), clientID: nil, authorizer: authorizer)
                try expectEqual(try allowed[0].get().batch?.version, 2, "the allowed request's version")
                try expectEqual(seen.withLock { $0 }, ["rooms/r1 ada>ada", "rooms/r2 ->ada"], "what the authorizer saw")
                let write = Mutation.set(path("rooms/r3"), ["owner": "ada"]).identified(by: id("w", 1))
                let giveAway = Mutation.update(path("rooms/r1"), fields: ["owner": "bob"]).identified(by: id("w", 2))
                let refused = try await store.commit([[write, giveAway]], limits: ServerLimits(), clientID: nil, authorizer: authorizer)[0].get()
                try expectEqual(refused.acknowledgements.map(\.status), [.refused, .refused], "a request with one forbidden write")
                try expectEqual(refused.acknowledgements.map { $0.error?.code }, [.permissionDenied, .permissionDenied], "the refusal's code")
                try expect(refused.batch == nil, "a refused request took a version")
                try expect(try await store.document(at: path("rooms/r3")) == nil, "a refused request wrote a document")
                try expectEqual(try await store.document(at: path("rooms/r1"))?.data, ["owner": "ada", "n": 2], "the document a refused request would have changed")
                // Sent again, even without the authorizer, the ids are answered with their refusal.
                let again = try await store.commit([[write, giveAway]], limits: ServerLimits(), clientID: nil)[0].get()
                try expectEqual(again.acknowledgements.map(\.status), [.refused, .refused], "the refused ids sent again")
                try expectEqual(try await store.currentVersion(), 2, "the watermark after the refusal")
            },
            Check("preconditions: exists, not exists and version") { opened in
                let store = opened.store
                try await expectError(.failedPrecondition, "exists on a missing document") {
                    _ = try await store.commit([Mutation.set(path("p/a"), [:]).requiring(.exists(true))])
                }
                _ = try await store.commit([Mutation.set(path("p/a"), ["v": 1]).requiring(.exists(false))])
                try await expectError(.failedPrecondition, "not-exists on an existing document") {
                    _ = try await store.commit([Mutation.set(path("p/a"), [:]).requiring(.exists(false))])
                }
                _ = try await store.commit([Mutation.update(path("p/a"), fields: ["v": 2]).requiring(.version(1))])
                try await expectError(.failedPrecondition, "a stale version") {
                    _ = try await store.commit([Mutation.update(path("p/a"), fields: ["v": 3]).requiring(.version(1))])
                }
                try expectEqual(try await store.document(at: path("p/a"))?.data, ["v": 2], "the document after its preconditions")
            },
            Check("a precondition that fails on what an earlier write of its request left is refused with the document as committed, naming no version nobody committed") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("e/other"), [:])])
                // e/x does not exist: the first write creates it, the second requires that it does not exist.
                let created = try await store.commitAll([[.set(path("e/x"), ["a": 1]), Mutation.set(path("e/x"), ["a": 2]).requiring(.exists(false))]])[0].get()
                try expectEqual(created.acknowledgements.map(\.status), [.refused, .refused], "a request whose second write requires that its first did not create the document")
                try expectEqual(created.refusal?.code, .failedPrecondition, "its refusal")
                try expect(created.acknowledgements.allSatisfy { $0.document == nil }, "the refusal carries a document that was never committed: \(created.acknowledgements)")
                try expectEqual(created.acknowledgements.map(\.version), [1, 1], "the refusal's versions")
                let uncreated = created.refusal?.message ?? ""
                try expect(!uncreated.contains("version"), "the refusal names a version: \(uncreated)")
                try expect(uncreated.contains("write 1"), "the refusal does not name the earlier write: \(uncreated)")
                try expect(try await store.document(at: path("e/x")) == nil, "a refused request wrote a document")
                try expectEqual(try await store.commit([.set(path("e/next"), [:])]).batch?.version, 2, "the next commit's version")

                // e/y exists at version 3: the first write changes it, the second requires version 3.
                _ = try await store.commit([.set(path("e/y"), ["a": 1])])
                let changed = try await store.commitAll([[.set(path("e/y"), ["a": 2]), Mutation.update(path("e/y"), fields: ["b": 1]).requiring(.version(3))]])[0].get()
                try expectEqual(changed.acknowledgements.map(\.status), [.refused, .refused], "a request whose second write requires the version its first changes")
                try expectEqual(changed.refusal?.code, .failedPrecondition, "its refusal")
                try expectEqual(changed.acknowledgements[1].document?.data, ["a": 1], "the document the refusal carries")
                try expectEqual(changed.acknowledgements[1].document?.version, 3, "the version of the document the refusal carries")
                try expect(changed.acknowledgements[0].document == nil, "the earlier write's refusal carries a document: \(changed.acknowledgements[0])")
                let stale = changed.refusal?.message ?? ""
                try expect(!stale.contains("version 4"), "the refusal names the version the request would have taken: \(stale)")
                try expect(stale.contains("write 1"), "the refusal does not name the earlier write: \(stale)")
                // An update of a document the first write deletes.
                let deleted = try await store.commitAll([[.delete(path("e/y")), .update(path("e/y"), fields: ["b": 1])]])[0].get()
                try expectEqual(deleted.refusal?.code, .notFound, "an update of a document an earlier write of its request deletes")
                try expect(deleted.refusal?.message.contains("write 1") == true, "the refusal does not name the earlier write: \(String(describing: deleted.refusal))")
                try expectEqual(try await store.document(at: path("e/y"))?.data, ["a": 1], "the document after the refusals")
                try expectEqual(try await store.document(at: path("e/y"))?.version, 3, "its version after the refusals")
                // Failing on the document as committed, a precondition's refusal still says its version.
                let committed = try await store.commitAll([[Mutation.update(path("e/y"), fields: ["b": 1]).requiring(.version(2))]])[0].get()
                try expectEqual(committed.acknowledgements.first?.document?.version, 3, "the document a refusal on committed state carries")
                try expect(committed.refusal?.message.contains("version 3") == true, "the refusal on committed state: \(String(describing: committed.refusal))")
                try expectEqual(try await store.commit([.set(path("e/next"), ["n": 2])]).batch?.version, 4, "the next commit's version")
            },
            Check("a write that fails on what an earlier write of its request left is concealed as the document as committed would be") { opened in
                let store = opened.store
                // Its caller may learn nothing of a document that does not exist.
                let authorizer = WriteAuthorizer({ _, _, _ in nil }, conceal: { path, document in
                    document == nil ? TandemError(.permissionDenied, "\(path) is hidden") : nil
                })
                let results = await store.commit([[.set(path("h/x"), ["a": 1]), Mutation.set(path("h/x"), ["a": 2]).requiring(.exists(false))]],
                                                 limits: ServerLimits(), clientID: nil, authorizer: authorizer)
                let answer = try results[0].get()
                try expectEqual(answer.acknowledgements.map(\.status), [.refused, .refused], "the request's answers")
                try expectEqual(answer.refusal?.code, .permissionDenied, "the refusal, when its caller may not learn the document was missing")
                try expect(answer.acknowledgements.allSatisfy { $0.document == nil }, "a concealed refusal carries a document: \(answer.acknowledgements)")
                try expect(try await store.document(at: path("h/x")) == nil, "a refused request wrote a document")
            },
            Check("transforms apply to the stored document, and later writes in one request see earlier ones") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("t/a"), ["n": 1, "tags": ["x"]])])
                let result = try await store.commit([
                    .update(path("t/a"), fields: [:], transforms: [.init("n", .increment(2)), .init("tags", .arrayUnion(["y", "x"]))]),
                    .update(path("t/a"), fields: [:], transforms: [.init("n", .increment(0.5)), .init("at", .serverTimestamp)]),
                ])
                guard let data = try await store.document(at: path("t/a"))?.data else { throw ConformanceFailure(message: "t/a is missing", file: #fileID, line: #line) }
                try expectEqual(data["n"], .double(3.5), "two increments in one request")
                try expectEqual(data["tags"], ["x", "y"], "arrayUnion")
                try expect(data["at"]?.stringValue?.hasSuffix("Z") == true, "serverTimestamp wrote \(String(describing: data["at"]))")
                try expectEqual(result.acknowledgements[0].document?.data["n"], .int(3), "the first answer's own state")
                try expectEqual(result.acknowledgements.map(\.version), [2, 2], "one version for one request")
            },
            Check("a request that changes no document still takes its own version, never given again after a reopen") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("n/x"), [:])])
                let noOp = try await store.commit([.delete(path("n/missing"))])
                try expectEqual(noOp.acknowledgements.first?.version, 2, "the version of a delete of a missing document")
                try expectEqual(try await store.currentVersion(), 2, "the watermark after a no-op commit")
                let reopened = try await opened.reopen()
                try expectEqual(try await reopened.currentVersion(), 2, "the watermark after a reopen")
                try expectEqual(try await reopened.commit([.set(path("n/y"), [:])]).batch?.version, 3, "the next version after a reopen")
            },
            Check("versions are never taken back by pruning, across a reopen") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("c/x"), [:])])
                _ = try await store.commit([.delete(path("c/x"))])
                _ = try await store.commit([.delete(path("c/y"))])
                try await store.pruneTombstones(olderThan: Date().addingTimeInterval(3600))
                let reopened = try await opened.reopen()
                try expectEqual(try await reopened.currentVersion(), 3, "the watermark after pruning and a reopen")
                try expectEqual(try await reopened.commit([.set(path("c/z"), [:])]).batch?.version, 4, "the next version")
            },
            Check("requests of one call are decided in order, each atomically") { opened in
                let store = opened.store
                let results = await store.commitAll([
                    [.set(path("o/a"), ["v": 1])],
                    [Mutation.update(path("o/a"), fields: ["v": 2]).requiring(.version(1))],
                    [.set(path("o/b"), [:]), Mutation.update(path("o/a"), fields: ["v": 3]).requiring(.version(1))],
                    [Mutation.update(path("o/a"), fields: ["v": 4]).requiring(.version(2))],
                ])
                try expectEqual(results.map { (try? $0.get())?.batch?.version }, [1, 2, nil, 3], "the versions of four requests in one call")
                try expectEqual((try? results[2].get())?.refusal?.code, .failedPrecondition, "the third request's refusal")
                try expectEqual(try await store.document(at: path("o/a"))?.data, ["v": 4], "the document after the call")
                try expect(try await store.document(at: path("o/b")) == nil, "a refused request of the call wrote a document")
            },
            Check("a malformed or oversized request fails undecided, alone in its call") { opened in
                let store = opened.store
                var limits = ServerLimits()
                limits.maximumDocumentBytes = 64
                limits.maximumBatchWrites = 2
                let big = String(repeating: "x", count: 100)
                let results = await store.commit([
                    [.set(path("l/a"), [:]), .set(path("l/b"), [:]), .set(path("l/c"), [:])],
                    [Mutation.set(path("l/big"), ["s": .string(big)]).identified(by: id("lim", 1))],
                    [.update(path("l/x"), fields: [:])],
                    [.set(path("l/ok"), ["v": 1])],
                ], limits: limits, clientID: nil)
                guard case .failure(let tooMany) = results[0], tooMany.code == .resourceExhausted else { throw ConformanceFailure(message: "a batch over the limit: \(results[0])", file: #fileID, line: #line) }
                try expectEqual((try? results[1].get())?.refusal?.code, .resourceExhausted, "a document over the limit")
                guard case .failure(let empty) = results[2], empty.code == .invalidArgument else { throw ConformanceFailure(message: "an update writing nothing: \(results[2])", file: #fileID, line: #line) }
                try expectEqual((try? results[3].get())?.batch?.version, 1, "the good request after the bad ones")
                try expect(try await store.document(at: path("l/big")) == nil, "an oversized document was written")
            },
            Check("a store that says commits are under way tells its observers again afterwards") { opened in
                let store = opened.store
                let heard = Locked(0)
                let (notices, continuation) = AsyncStream.makeStream(of: Int.self)
                store.observeCommits { _ in continuation.yield(heard.withLock { $0 += 1; return $0 }) }
                // Asked as each of many concurrent writers is answered (a store answering false
                // promises nothing and passes at once).
                let promised = try await withThrowingTaskGroup(of: Int?.self) { group in
                    for index in 0..<32 {
                        group.addTask {
                            _ = try await store.commit([.set(path("busy/\(index)"), ["i": .int(index)])])
                            let before = heard.withLock { $0 }
                            return store.commitsUnderWay() ? before : nil
                        }
                    }
                    return try await group.reduce(into: [Int]()) { all, count in if let count { all.append(count) } }
                }
                // A notice after the last promise (a store that breaks it leaves this check waiting).
                if let last = promised.max() {
                    for await count in notices where count > last { break }
                }
                try expectEqual(try await store.currentVersion(), 32, "the watermark after the writes")
            },
            Check("concurrent writers each get their own version; observers hear of every batch once, in order, before its writer") { opened in
                let store = opened.store
                let heard = Locked<(batches: [Version], watermark: Version)>(([], .zero))
                store.observeCommits { notice in
                    heard.withLock { heard in
                        heard.batches += notice.batches.map(\.version)
                        heard.watermark = max(heard.watermark, notice.visibleThrough)
                    }
                }
                let versions = try await withThrowingTaskGroup(of: Version.self) { group in
                    for index in 0..<48 {
                        group.addTask {
                            let result = try await store.commit([.set(path("items/\(index)"), ["i": .int(index)])])
                            let version = result.batch?.version ?? .zero
                            // Visible and told before answered.
                            let told = heard.withLock { $0.watermark >= version && $0.batches.contains(version) }
                            try expect(told, "commit \(version) was answered before observers heard of it")
                            try expect(try await store.document(at: path("items/\(index)")) != nil, "commit \(version) was answered before it was visible")
                            return version
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                try expectEqual(Set(versions), Set((1...48).map { Version(UInt64($0)) }), "the versions given")
                try expectEqual(heard.withLock { $0.batches }, (1...48).map { Version(UInt64($0)) }, "the batches observers heard, in order")
                try expectEqual(heard.withLock { $0.watermark }, 48, "the watermark observers heard")
                try expectEqual(try await store.read(.collection(collection("items"), Query())).documents.count, 48, "the documents written")
            },
        ]
    }
}
