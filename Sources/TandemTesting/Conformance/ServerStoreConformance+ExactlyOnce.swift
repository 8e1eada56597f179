import Foundation
import TandemCore
import TandemServer

extension ServerStoreConformance {
    static var exactlyOnceChecks: [Check] {
        [
            Check("a mutation id applied once is answered again with its first answer, never applied twice, across a reopen") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                let once = increment.identified(by: id("phone", 1))
                let original = try await store.commit([once])
                try expectEqual(original.acknowledgements.map(\.status), [.applied], "the first answer")
                let replay = try await store.commit([once])
                try expectEqual(replay.acknowledgements, original.acknowledgements.map(\.replayed), "the replay's answer")
                try expect(replay.batch == nil, "a replay committed a batch")
                try expectEqual(try await store.counter(), 1, "the counter after a replay")
                // Two requests of one call with the same id: applied by the first, replayed by the second.
                let twice = increment.identified(by: id("phone", 2))
                let both = await store.commitAll([[twice], [twice]])
                try expectEqual(both.map { (try? $0.get())?.acknowledgements.first?.status }, [.applied, .replayed], "one id twice in one call")
                let reopened = try await opened.reopen()
                let later = try await reopened.commit([once, twice])
                try expectEqual(later.acknowledgements.map(\.status), [.replayed, .replayed], "replays after a reopen")
                try expectEqual(later.acknowledgements.map(\.version), [2, 3], "the first versions, after a reopen")
                try expectEqual(try await reopened.counter(), 2, "the counter after replays and a reopen")
            },
            Check("pipelined writes retried with their ids apply once each, whatever was lost in between") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                let writes = (1...40).map { increment.identified(by: id("pipe", UInt64($0))) }
                // Sent together, then every one sent again (as after a lost connection), then again in pairs.
                _ = await store.commitAll(writes.map { [$0] })
                let again = await store.commitAll(writes.map { [$0] })
                try expect(again.allSatisfy { (try? $0.get())?.acknowledgements.first?.status == .replayed }, "a resent write was not answered as a replay")
                _ = await store.commitAll(stride(from: 0, to: 40, by: 2).map { [writes[$0], writes[$0 + 1]] })
                try expectEqual(try await store.counter(), 40, "the counter after 40 writes sent three times")
            },
            Check("a write refused for good is refused again with the same error, even after later writes of its client applied") { opened in
                let store = opened.store
                let refusedFirst = Mutation.update(path("r/missing"), fields: ["v": 1]).identified(by: id("phone", 1))
                let first = try await store.commitAll([[refusedFirst]])[0].get()
                try expectEqual(first.acknowledgements.first?.status, .refused, "the first answer")
                let error = try await expectError(.notFound, "the refused write") { _ = try await store.commit([refusedFirst]) }
                _ = try await store.commit([Mutation.set(path("r/missing"), ["v": 0]).identified(by: id("phone", 2))])
                let again = try await expectError(.notFound, "the refused write sent again after the document exists") { _ = try await store.commit([refusedFirst]) }
                try expectEqual(again.message, error.message, "the error given again")
                try expectEqual(try await store.document(at: path("r/missing"))?.data, ["v": 0], "the document")
                let reopened = try await opened.reopen()
                try await expectError(.notFound, "the refused write after a reopen") { _ = try await reopened.commit([refusedFirst]) }
            },
            Check("an id below its client's newest that was never decided is refused, not acknowledged") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                _ = try await store.commit([increment.identified(by: id("phone", 10))])
                let late = try await store.commitAll([[increment.identified(by: id("phone", 7))]])[0].get()
                try expectEqual(late.acknowledgements.first?.status, .refused, "an id never sent, below the newest")
                try expectEqual(late.acknowledgements.first?.error?.code, .invalidArgument, "its refusal")
                try expectEqual(try await store.counter(), 1, "the counter")
                // Its refusal is kept: the same answer again.
                try await expectError(.invalidArgument, "the late id sent again") { _ = try await store.commit([increment.identified(by: id("phone", 7))]) }
                // Another client is not affected.
                _ = try await store.commit([increment.identified(by: id("tablet", 1))])
                try expectEqual(try await store.counter(), 2, "the counter after another client's write")
            },
            Check("an id reused for another write is refused and changes nothing; the same write sent again is a replay") { opened in
                let store = opened.store
                let original = Mutation.set(path("u/a"), ["v": 1]).identified(by: id("phone", 1))
                let first = try await store.commit([original])
                let reused = try await store.commitAll([[Mutation.set(path("u/b"), ["v": 2]).identified(by: id("phone", 1))]])[0].get()
                try expectEqual(reused.acknowledgements.first?.status, .refused, "a reused id")
                try expectEqual(reused.acknowledgements.first?.error?.code, .invalidArgument, "its refusal")
                try expect(try await store.document(at: path("u/b")) == nil, "the reused id's write was applied")
                try expectEqual(try await store.commit([original]).acknowledgements, first.acknowledgements.map(\.replayed), "the original write sent again")
                // Keys in another order are the same write.
                let spelled = Mutation.set(path("u/c"), ["a": 1, "b": 2]).identified(by: id("phone", 2))
                _ = try await store.commit([spelled])
                let respelled = Mutation(path: path("u/c"), kind: .set(["b": 2, "a": 1]), id: id("phone", 2))
                try expectEqual(try await store.commit([respelled]).acknowledgements.first?.status, .replayed, "the same write with its keys in another order")
            },
            Check("a repeated id in one request, or a client's sequences going down in it, fail the request undecided") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                let results = await store.commitAll([
                    [increment.identified(by: id("phone", 1)), increment.identified(by: id("phone", 1))],
                    [increment.identified(by: id("phone", 3)), increment.identified(by: id("phone", 2))],
                ])
                for result in results {
                    guard case .failure(let error) = result, error.code == .invalidArgument else {
                        throw ConformanceFailure(message: "a request with repeated or decreasing ids: \(result)", file: #fileID, line: #line)
                    }
                }
                try expectEqual(try await store.counter(), 0, "the counter")
                // Nothing was recorded: the ids are still free.
                _ = try await store.commit([increment.identified(by: id("phone", 1)), increment.identified(by: id("phone", 2))])
                try expectEqual(try await store.counter(), 2, "the counter once the ids are sent properly")
            },
            Check("a request mixing replays and new writes answers the replays and applies the new ones once") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                let five = increment.identified(by: id("phone", 5))
                _ = try await store.commit([five])
                let mixed = try await store.commit([five, increment.identified(by: id("phone", 6))])
                try expectEqual(mixed.acknowledgements.map(\.status), [.replayed, .applied], "the statuses")
                try expectEqual(mixed.acknowledgements.map(\.version), [2, 3], "the versions")
                try expectEqual(try await store.counter(), 2, "the counter")
                // A new write beside one refused before is refused with it.
                let refused = Mutation.update(path("m/none"), fields: ["v": 1]).identified(by: id("phone", 7))
                _ = await store.commitAll([[refused]])
                let blocked = try await store.commitAll([[refused, increment.identified(by: id("phone", 8))]])[0].get()
                try expectEqual(blocked.acknowledgements.map(\.status), [.refused, .refused], "a new write beside a refused one")
                // For good: a passing code would have the client send it again forever.
                try expectEqual(blocked.acknowledgements.map { $0.error?.code }, [.notFound, .failedPrecondition], "the codes of a new write beside a refused one")
                try expectEqual(try await store.counter(), 2, "the counter after the refused request")
            },
            Check("a writer id belongs to the client that first wrote under it: no other client can write, replay or poison it") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                func send(_ mutation: Mutation, as client: String?) async -> Result<CommitResult, TandemError> {
                    await store.commit([[mutation]], limits: ServerLimits(), clientID: client)[0]
                }
                try expectEqual(try await send(increment.identified(by: id("w1", 1)), as: "alice").get().acknowledgements.first?.status, .applied, "alice's first write")
                for (client, sequence) in [("mallory", UInt64(2)), ("mallory", UInt64(1) << 62), ("mallory", UInt64(1))] {
                    guard case .failure(let error) = await send(increment.identified(by: id("w1", sequence)), as: client), error.code == .permissionDenied else {
                        throw ConformanceFailure(message: "\(client) wrote w1#\(sequence)", file: #fileID, line: #line)
                    }
                }
                guard case .failure(let alone) = await send(increment.identified(by: id("w1", 2)), as: nil), alone.code == .permissionDenied else {
                    throw ConformanceFailure(message: "a request without a client wrote under alice's writer id", file: #fileID, line: #line)
                }
                // Nothing was recorded against alice's id: her next sequence is still hers to use.
                try expectEqual(try await send(increment.identified(by: id("w1", 2)), as: "alice").get().acknowledgements.first?.status, .applied, "alice's next write")
                try expectEqual(try await store.counter(), 2, "the counter")
                // Writes without a client claim nothing; ownership survives a reopen.
                _ = await send(increment.identified(by: id("free", 1)), as: nil)
                let reopened = try await opened.reopen()
                guard case .failure = await reopened.commit([[increment.identified(by: id("w1", 3))]], limits: ServerLimits(), clientID: "mallory")[0] else {
                    throw ConformanceFailure(message: "mallory wrote under alice's writer id after a reopen", file: #fileID, line: #line)
                }
                let claimed = await reopened.commit([[increment.identified(by: id("free", 2))]], limits: ServerLimits(), clientID: "bob")[0]
                try expectEqual(try claimed.get().acknowledgements.first?.status, .applied, "bob's write under a writer id nobody owned")
            },
            Check("after pruning, a pruned id is answered unknown, each client's newest record stays, and nothing applies twice") { opened in
                let store = opened.store
                _ = try await store.commit([.set(path("counters/a"), ["n": 0])])
                _ = try await store.commit([increment.identified(by: id("phone", 1))])
                _ = try await store.commit([increment.identified(by: id("phone", 2))])
                _ = try await store.commit([Mutation.delete(path("counters/gone")).identified(by: id("tablet", 1))])
                try await store.pruneTombstones(olderThan: Date().addingTimeInterval(3600))
                let reopened = try await opened.reopen()
                let pruned = try await reopened.commit([increment.identified(by: id("phone", 1))])
                try expectEqual(pruned.acknowledgements.first?.status, .unknown, "a pruned id")
                try expect(pruned.batch == nil, "a pruned id was applied again")
                let newest = try await reopened.commit([increment.identified(by: id("phone", 2))])
                try expectEqual(newest.acknowledgements.first?.status, .replayed, "the client's newest id")
                try expectEqual(newest.acknowledgements.first?.version, 3, "its first version")
                let tablet = try await reopened.commit([Mutation.delete(path("counters/gone")).identified(by: id("tablet", 1))])
                try expectEqual(tablet.acknowledgements.first?.version, 4, "a kept answer that deleted")
                try expectEqual(try await reopened.counter(), 2, "the counter")
                _ = try await reopened.commit([increment.identified(by: id("phone", 3))])
                try expectEqual(try await reopened.counter(), 3, "a new id after pruning")
                // A new write beside a pruned id is refused for good, the pruned one answered unknown again.
                let beside = try await reopened.commitAll([[increment.identified(by: id("phone", 1)), increment.identified(by: id("phone", 4))]])[0].get()
                try expectEqual(beside.acknowledgements.map(\.status), [.unknown, .refused], "a new write beside a pruned id")
                try expectEqual(beside.acknowledgements.last?.error?.code, .failedPrecondition, "the code of a new write beside a pruned id")
                try expectEqual(try await reopened.counter(), 3, "the counter after a write beside a pruned id")
            },
        ]
    }
}
