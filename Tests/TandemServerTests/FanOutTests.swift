import Foundation
import Testing
import TandemCore
@testable import TandemServer
import TandemTesting

@Suite("Fan-out")
struct FanOutTests {
    func path(_ text: String) -> DocumentPath { try! DocumentPath(text) }

    func listener(_ session: Int, _ target: Int, _ listenTarget: ListenTarget, outbox: SessionOutbox = SessionOutbox(budget: 1 << 20)) throws -> ListenerState {
        try ListenerState(key: ListenerKey(session: session, target: target), target: listenTarget, outbox: outbox)
    }

    @Test("the listener table groups listeners by target, each group sorted by connection, and finds groups by path")
    func table() throws {
        var table = ListenerTable()
        let notes = ListenTarget.collection(try CollectionPath("notes"), Query())
        let filtered = ListenTarget.collection(try CollectionPath("notes"), Query().whereField("n", isEqualTo: 1))
        for (session, target) in [(3, 1), (1, 2), (2, 1), (1, 1)] { table.insert(try listener(session, target, notes)) }
        table.insert(try listener(1, 9, filtered))
        table.insert(try listener(4, 1, .document(path("notes/a"))))
        table.insert(try listener(5, 1, .collectionGroup("notes", Query())))
        #expect(table.count == 7)
        var touched: [Int] = []
        table.groups(touching: path("notes/a")) { touched.append($0) }
        #expect(touched.count == 4)  // the document, two collection queries, the group
        var order: [ListenerKey] = []
        for id in touched {
            table.updateGroup(id) { group in
                if group.target == notes { order = group.members.map(\.key) }
            }
        }
        #expect(order == [ListenerKey(session: 1, target: 1), ListenerKey(session: 1, target: 2), ListenerKey(session: 2, target: 1), ListenerKey(session: 3, target: 1)])
        #expect(table[ListenerKey(session: 2, target: 1)]?.target == notes)
        #expect(table.update(ListenerKey(session: 2, target: 1)) { $0.phase = .live(7) } != nil)
        guard case .live(7)? = table[ListenerKey(session: 2, target: 1)]?.phase else { Issue.record("expected the update kept"); return }
        #expect(Set(table.keys(ofSession: 1)) == [ListenerKey(session: 1, target: 1), ListenerKey(session: 1, target: 2), ListenerKey(session: 1, target: 9)])
        for key in table.keys(ofSession: 1) { table.remove(key) }
        table.remove(ListenerKey(session: 4, target: 1))
        touched = []
        table.groups(touching: path("notes/a")) { touched.append($0) }
        #expect(touched.count == 2 && table.count == 3)  // the filtered query and the document's groups went with their last listener
    }

    @Test("changes for the same listeners merge while they wait; anything else keeps its place")
    func outboxMerges() async throws {
        let outbox = SessionOutbox(budget: 1 << 20)
        let change = { (n: Int) in Array(#"{"path":"a/\#(n)"}"#.utf8) }
        outbox.send(changes: Array("[".utf8) + change(1) + Array("]".utf8), targets: [1, 2], version: 5)
        outbox.send(changes: Array("[".utf8) + change(2) + Array("]".utf8), targets: [1, 2], version: 6)
        outbox.send(text: "ack")
        outbox.send(changes: Array("[".utf8) + change(3) + Array("]".utf8), targets: [1, 2], version: 7)
        outbox.send(changes: Array("[".utf8) + change(4) + Array("]".utf8), targets: [3], version: 7)
        var texts: [String] = []
        for _ in 0..<4 {
            guard let (text, bytes) = await outbox.next() else { break }
            texts.append(text)
            outbox.wrote(bytes)
        }
        #expect(texts[0] == #"{"changes":[{"path":"a/1"},{"path":"a/2"}],"targets":[1,2],"type":"changes","version":6}"#)
        #expect(texts[1] == "ack")
        #expect(texts[2] == #"{"changes":[{"path":"a/3"}],"targets":[1,2],"type":"changes","version":7}"#)
        #expect(texts[3] == #"{"changes":[{"path":"a/4"}],"target":3,"type":"changes","version":7}"#)
        outbox.finish()
        #expect(await outbox.next() == nil)
    }

    @Test("an attached writer is called once for whatever queues until it takes it, gets it all in order, and nothing after the outbox closes")
    func outboxPushes() async throws {
        let outbox = SessionOutbox(budget: 1 << 20)
        outbox.send(text: "early")
        let calls = Locked(0)
        // Messages queued before the writer attached are its first drain.
        outbox.attach { calls.withLock { $0 += 1 } }
        #expect(calls.withLock { $0 } == 1)
        outbox.send(text: "a")
        outbox.send(changes: Array(#"[{"path":"a/1"}]"#.utf8), targets: [1, 2], version: 5)
        outbox.send(changes: Array(#"[{"path":"a/2"}]"#.utf8), targets: [1, 2], version: 6)
        // Told once until it takes them.
        #expect(calls.withLock { $0 } == 1)
        let taken = try #require(outbox.takeAll())
        #expect(taken.map(\.message.text) == ["early", "a", #"{"changes":[{"path":"a/1"},{"path":"a/2"}],"targets":[1,2],"type":"changes","version":6}"#])
        outbox.wrote(taken.reduce(0) { $0 + $1.bytes })
        outbox.send(text: "b")
        #expect(calls.withLock { $0 } == 2)
        #expect(try #require(outbox.takeAll()).map(\.message.text) == ["b"])
        outbox.finish()
        outbox.send(text: "c")
        #expect(calls.withLock { $0 } == 2 && outbox.takeAll() == nil)
    }

    @Test("past its budget an outbox overflows once, tells its owner, and takes nothing more")
    func outboxOverflows() async throws {
        let outbox = SessionOutbox(budget: 100)
        let told = Locked(0)
        outbox.onOverflow = { told.value += 1 }
        #expect(outbox.send(text: String(repeating: "x", count: 60)))
        #expect(!outbox.send(text: String(repeating: "y", count: 60)))
        #expect(!outbox.send(text: "z"))
        #expect(told.value == 1 && outbox.isOverflowed && outbox.isClosed)
        #expect(await outbox.next() == nil)
    }

    @Test("under sustained load the hub delivers once a pacing interval on its clock, the commits meanwhile in one batch")
    func pacedDeliveries() async throws {
        let store = MemoryServerStore(clock: ManualClock())
        let clock = ManualClock()
        let hub = FanOutHub(store: store, pacing: FanOutPacing(interval: .milliseconds(5), busyCommits: 2), clock: ServerClock(clock))
        store.observeCommits { hub.receive($0) }
        let running = Task { try await hub.run() }
        defer { running.cancel() }
        let outbox = SessionOutbox(budget: 1 << 20)
        await hub.listen(ListenerKey(session: 1, target: 1), target: .collection(try CollectionPath("notes"), Query()), resumeFrom: nil, outbox: outbox)
        func take() async throws -> [Version] {
            guard let (text, bytes) = await outbox.next() else { throw TandemError(.internal, "no message") }
            outbox.wrote(bytes)
            guard case .batch(_, let batch, _, _) = try ServerMessage.parse(text) else { throw TandemError(.internal, "not a batch: \(text)") }
            return batch.changes.map(\.version)
        }
        #expect(try await take() == [])  // the snapshot
        // One commit: no load, delivered at once.
        _ = try await store.commit([.set(path("notes/a"), ["n": 1])])
        #expect(try await take() == [1])
        // A second within the interval is load: the hub sleeps until 5 ms after its last delivery.
        _ = try await store.commit([.set(path("notes/a"), ["n": 2])])
        await clock.waitForSleepers { $0 == [ManualClock.Instant(offset: .milliseconds(5))] }
        _ = try await store.commit([.set(path("notes/b"), ["n": 3])])
        _ = try await store.commit([.set(path("notes/a"), ["n": 4])])
        #expect(outbox.queuedCount == 0)
        clock.advance(by: .milliseconds(5))
        #expect(try await take() == [2, 3, 4])
    }

    @Test("a notice that the store missed commits has every live listener load again from where it was: a plain, a filtered and a limit listener each get what they missed")
    func incompleteNoticeReloads() async throws {
        let store = MemoryServerStore(clock: ManualClock())
        let hub = FanOutHub(store: store)
        let running = Task { try await hub.run() }
        defer { running.cancel() }
        let notes = try CollectionPath("notes")
        let outbox = SessionOutbox(budget: 1 << 20)
        func take() async throws -> (target: Int, changes: [String], version: Version, reset: Bool) {
            guard let (text, bytes) = await outbox.next() else { throw TandemError(.internal, "no message") }
            outbox.wrote(bytes)
            guard case .batch(let target, let batch, let reset, _) = try ServerMessage.parse(text) else { throw TandemError(.internal, "not a batch: \(text)") }
            return (target, batch.changes.map { "\($0.path.id)\($0.document == nil ? "-" : "+")" }, batch.version, reset)
        }
        _ = try await store.commit([.set(path("notes/a"), ["n": 1])])
        await hub.listen(ListenerKey(session: 1, target: 1), target: .collection(notes, Query()), resumeFrom: nil, outbox: outbox)
        await hub.listen(ListenerKey(session: 1, target: 2), target: .collection(notes, Query().whereField("n", isGreaterThan: 1)), resumeFrom: nil, outbox: outbox)
        await hub.listen(ListenerKey(session: 1, target: 3), target: .collection(notes, Query().order(by: "n").limit(to: 1)), resumeFrom: nil, outbox: outbox)
        for _ in 0..<3 { _ = try await take() }  // the snapshots
        // Commits the hub is never told of (it observes nothing here), as a node cut off misses them.
        _ = try await store.commit([.set(path("notes/b"), ["n": 2])])
        _ = try await store.commit([.set(path("notes/c"), ["n": 0])])
        #expect(outbox.queuedCount == 0)
        hub.receive(CommitNotice(batches: [], visibleThrough: Version(3), incomplete: true))
        var got: [Int: (changes: [String], version: Version, reset: Bool)] = [:]
        for _ in 0..<3 {
            let batch = try await take()
            got[batch.target] = (batch.changes, batch.version, batch.reset)
        }
        #expect(got[1]?.changes == ["b+", "c+"] && got[1]?.version == Version(3) && got[1]?.reset == false, "the plain listener resumes with what it missed")
        #expect(got[2]?.changes == ["b+", "c-"] && got[2]?.version == Version(3), "the filtered listener hears b enter and c as not in its view")
        #expect(got[3]?.changes == ["c+"] && got[3]?.reset == true, "the limit listener takes a snapshot that replaces its view")
        // Live again: the next commit it is told of reaches them as before.
        store.observeCommits { hub.receive($0) }
        _ = try await store.commit([.set(path("notes/d"), ["n": 5])])
        var live: Set<Int> = []
        for _ in 0..<2 { live.insert(try await take().target) }
        #expect(live == [1, 2])
    }

    @Test("a publication of several commits reaches a listener as one batch of whole commits, oldest first, at the last version")
    func coalescedPublication() async throws {
        let store = MemoryServerStore(clock: ManualClock())
        let hub = FanOutHub(store: store)
        let outbox = SessionOutbox(budget: 1 << 20)
        let notes = ListenTarget.collection(try CollectionPath("notes"), Query())
        await hub.listen(ListenerKey(session: 1, target: 1), target: notes, resumeFrom: nil, outbox: outbox)
        await hub.listen(ListenerKey(session: 1, target: 2), target: notes, resumeFrom: nil, outbox: outbox)
        for _ in 0..<2 {
            guard let (snapshot, _) = await outbox.next() else { Issue.record("expected a snapshot"); return }
            #expect(snapshot.contains(#""type":"snapshot""#))
        }
        let first = CommittedBatch(version: 1, changes: [.upsert(Document(path: path("notes/a"), data: ["n": 1], version: 1))])
        let second = CommittedBatch(version: 2, changes: [.upsert(Document(path: path("notes/a"), data: ["n": 2], version: 2)),
                                                          .removal(path("notes/b"), version: 2)])
        hub.publish([first, second])
        guard let (text, _) = await outbox.next(), case .sharedBatch(let targets, let batch) = try ServerMessage.parse(text) else {
            Issue.record("expected one shared batch")
            return
        }
        #expect(targets == [1, 2] && batch.version == 2)
        #expect(batch.changes.map(\.version) == [1, 2, 2] && batch.changes.map(\.path.id) == ["a", "a", "b"])
    }

    @Test("a group whose listeners all take every commit goes by connection; one that joins with a newer snapshot gets only what its snapshot lacks")
    func plainGroups() async throws {
        let store = MemoryServerStore(clock: ManualClock())
        let hub = FanOutHub(store: store)
        let notes = ListenTarget.collection(try CollectionPath("notes"), Query())
        let first = SessionOutbox(budget: 1 << 20)
        let second = SessionOutbox(budget: 1 << 20)
        func take(_ outbox: SessionOutbox) async throws -> (targets: [Int], versions: [Version]) {
            guard let (text, bytes) = await outbox.next() else { throw TandemError(.internal, "no message") }
            outbox.wrote(bytes)
            switch try ServerMessage.parse(text) {
            case .sharedBatch(let targets, let batch): return (targets, batch.changes.map(\.version))
            case .batch(let target, let batch, _, _): return ([target], batch.changes.map(\.version))
            default: throw TandemError(.internal, "not a batch: \(text)")
            }
        }
        func commit(_ version: UInt64) -> CommittedBatch {
            CommittedBatch(version: Version(version), changes: [.upsert(Document(path: path("notes/n\(version)"), data: [:], version: Version(version)))])
        }
        await hub.listen(ListenerKey(session: 1, target: 1), target: notes, resumeFrom: nil, outbox: first)
        await hub.listen(ListenerKey(session: 2, target: 1), target: notes, resumeFrom: nil, outbox: second)
        _ = try await take(first)
        _ = try await take(second)
        hub.publish(commit(1))  // the group's first publication, member by member; then by connection
        hub.publish(commit(2))
        // Both were queued before anything was written: they went out as one batch.
        for outbox in [first, second] {
            #expect(try await take(outbox).versions == [1, 2])
        }
        // A listener joins whose snapshot is read at version 4, while the hub has published only
        // through 2: commits 3 and 4 are in its snapshot, not its changes.
        for index in 1...4 { _ = try await store.commit([.set(path("notes/s\(index)"), [:])]) }
        await hub.listen(ListenerKey(session: 2, target: 2), target: notes, resumeFrom: nil, outbox: second)
        guard let (snapshot, bytes) = await second.next() else { Issue.record("expected a snapshot"); return }
        second.wrote(bytes)
        #expect(snapshot.contains(#""type":"snapshot""#) && snapshot.hasSuffix(#""version":4}"#))
        hub.publish([commit(3), commit(4), commit(5)])
        #expect(try await take(first).versions == [3, 4, 5])
        let toSecond = try await take(second)
        let toNewcomer = try await take(second)
        #expect(toSecond.targets == [1] && toSecond.versions == [3, 4, 5])
        #expect(toNewcomer.targets == [2] && toNewcomer.versions == [5])
        // From then on, all three take every commit: one message per connection.
        hub.publish(commit(6))
        #expect(try await take(first).versions == [6])
        let shared = try await take(second)
        #expect(shared.targets == [1, 2] && shared.versions == [6])
        #expect(hub.state.withLock { $0.table.plainTargets(of: notes) } == [[1], [1, 2]])
        // One leaves: the one-step list is dropped, made again at the next commit without it, and
        // the one that left is sent nothing.
        hub.unlisten(ListenerKey(session: 1, target: 1))
        #expect(hub.state.withLock { $0.table.plainTargets(of: notes) } == nil)
        hub.publish(commit(7))
        #expect(try await take(second).targets == [1, 2])
        #expect(hub.state.withLock { $0.table.plainTargets(of: notes) } == [[1, 2]])
        hub.publish(commit(8))
        #expect(try await take(second).versions == [8])
        #expect(first.queuedCount == 0 && first.isClosed == false)
    }
}
