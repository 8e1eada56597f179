import Testing
import TandemCore
@testable import Tandem

@Suite("Outbox")
struct OutboxTests {
    let a = try! DocumentPath("items/a")
    let b = try! DocumentPath("items/b")

    @Test("writes get increasing ids from the client and keep their order")
    func ordering() {
        var outbox = Outbox(clientID: "c1")
        let first = outbox.enqueue(.set(a, ["n": 1])).entry
        let second = outbox.enqueue(.set(b, ["n": 1])).entry
        let third = outbox.enqueue(.delete(a)).entry  // not merged: the newest entry is b's
        #expect([first, second, third].map(\.id) == [1, 2, 3].map { MutationID(clientID: "c1", sequence: $0) })
        #expect(outbox.entries.map(\.path) == [a, b, a])
        #expect(outbox.first?.id == first.id)
        #expect(first.mutation.id == first.id, "the mutation carries its id to the server")
    }

    @Test("an update after an update merges fields, the later value winning")
    func updateMerge() throws {
        var outbox = Outbox(clientID: "c")
        outbox.enqueue(.update(a, fields: ["x": 1, "address.city": "London"]))
        let result = outbox.enqueue(.update(a, fields: ["x": 2, "address": ["zip": "N1"]]))
        guard case .merged(let entry) = result else {
            Issue.record("expected a merge")
            return
        }
        #expect(outbox.count == 1)
        #expect(entry.id.sequence == 1, "the merged write keeps the older id")
        let body = entry.mutation.applyToBody(["y": 0, "address": ["city": "Paris", "zip": "E1"]], serverTime: ServerTime(.now))
        #expect(body == ["y": 0, "x": 2, "address": ["zip": "N1"]])
    }

    @Test("an update after a set folds into the set; a delete supersedes")
    func setThenUpdateThenDelete() {
        var outbox = Outbox(clientID: "c")
        outbox.enqueue(.set(a, ["x": 1]))
        outbox.enqueue(.update(a, fields: ["y.z": 2]))
        #expect(outbox.entries.map(\.mutation.kind) == [.set(["x": 1, "y": ["z": 2]])])
        outbox.enqueue(.delete(a))
        #expect(outbox.entries.map(\.mutation.kind) == [.delete])
        #expect(outbox.entries.first?.id.sequence == 1)
    }

    @Test("writes that would change meaning are not merged")
    func noMerge() {
        var outbox = Outbox(clientID: "c")
        outbox.enqueue(.update(a, fields: ["n": 1]))
        // A transform reads the document as the first write leaves it.
        outbox.enqueue(.update(a, fields: [:], transforms: [.init("n", .increment(1))]))
        #expect(outbox.count == 2)
        // A precondition must be checked on its own.
        outbox.enqueue(Mutation.update(a, fields: ["m": 1]).requiring(.version(3)))
        #expect(outbox.count == 3)
        // An update after a delete must fail on its own (not-found), and the caller be told.
        outbox.enqueue(.delete(b))
        outbox.enqueue(.update(b, fields: ["m": 1]))
        #expect(outbox.count == 5)
    }

    @Test("an entry once sent is never merged: the server may have applied it under its id")
    func sentEntriesStayApart() {
        var outbox = Outbox(clientID: "c")
        let sent = outbox.enqueue(.update(a, fields: ["n": 1])).entry
        outbox.markAttempted(sent.id)
        outbox.enqueue(.update(a, fields: ["n": 2]))
        #expect(outbox.count == 2)
        #expect(outbox.remove(sent.id)?.attempts == 1)
        #expect(outbox.entries.map(\.id.sequence) == [2])
    }

    @Test("a restored outbox continues after its highest sequence")
    func restore() throws {
        var outbox = Outbox(clientID: "c")
        outbox.enqueue(.set(a, [:]))
        outbox.enqueue(.set(b, [:]))
        let restored = Outbox(clientID: "c", entries: Array(outbox.entries), nextSequence: 1)
        var copy = restored
        #expect(copy.enqueue(.delete(a)).entry.id.sequence == 3)
    }
}
