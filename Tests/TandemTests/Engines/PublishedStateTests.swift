import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// Readers see an immutable snapshot the engine publishes after each change; they never wait for
/// the executor its changes run on.
// A guard against a hang, not a measure of speed: beside the whole suite (a browser and a fuzzer
// among it) on two cores its largest test has taken 90 s.
@Suite("Engines publish their state to readers", .timeLimit(.minutes(5)))
struct PublishedStateTests {
    @Test("every reader answers while the engine's executor is busy: none of them waits for it")
    func readersNeverWaitForTheOwner() async throws {
        let remote = MockRemoteCollectionService(collection: QueryViewTests.items, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "published", persistence: nil, clock: ManualClock())
        await engine.startListening { $0.whereField("price", isLessThan: 100).order(by: "price") }
        remote.store.goOffline()
        try await engine.updateDocument(id: "a", data: ["price": 90])
        // A reader that waited for the executor would hang here (and the time limit would fail the test).
        let read = engine.core.whileOwnerBusy {
            (engine.currentCollection.map(\.id), engine.getDocument(id: "a")?.price, engine.pendingWrites.count,
             engine.metadata(id: "a").hasPendingWrites, engine.metadata(id: "b").hasPendingWrites,
             engine.rejectedWrites.count, engine.isFromCache, engine.hasPendingWrites, engine.core.shownState())
        }
        // What a snapshot sequence reads, too.
        #expect(read.8.paths.map(\.id) == read.0 && read.8.metadata.hasPendingWrites && read.8.revisions.count == 4)
        #expect(read.0 == ["c", "b", "e", "a"])
        #expect(read.1 == 90)
        #expect(read.2 == 1)
        #expect(read.3 && !read.4)
        #expect(read.5 == 0 && !read.6 && read.7)

        let documents = DocumentSyncEngine<Product>(remote: MockRemoteDocumentService(document: QueryViewTests.items[1], collectionPath: { "products" }), managerKey: "published-document", persistence: nil, clock: ManualClock())
        try await documents.startListening(documentId: "b")
        let document = documents.core.whileOwnerBusy { (documents.currentDocument?.name, documents.metadata().isFromCache) }
        #expect(document.0 == "Birch" && !document.1)
    }

    @Test("a snapshot a reader holds never changes; the next change publishes a new one")
    func snapshotsAreImmutable() async throws {
        let remote = MockRemoteCollectionService(collection: QueryViewTests.items, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "immutable", persistence: nil, clock: ManualClock())
        await engine.startListening { $0.order(by: "price").limit(to: 3) }
        remote.store.goOffline()
        let before = engine.core.snapshot
        #expect(before.shown.map(\.id) == ["a", "c", "b"])
        try await engine.saveDocument(Product(id: "cup", name: "Cup", price: 1, stock: 1))
        try await engine.deleteDocument(id: "c")
        #expect(engine.currentCollection.map(\.id) == ["cup", "a", "b"])
        #expect(engine.pendingWrites.map(\.path.id) == ["cup", "c"])
        // The old one is as it was, whole.
        #expect(before.shown.map(\.id) == ["a", "c", "b"])
        #expect(before.model(at: try DocumentPath("products/c"))?.name == "Cedar")
        #expect(before.pendingWrites.isEmpty)
        #expect(engine.core.snapshot.generation > before.generation)

    }

    @Test("a publish that leaves the shown models as they were keeps the array readers were given")
    func shownArrayKept() async throws {
        let products = (0..<1_000).map { Product(id: String(format: "p%04d", $0), name: "n", price: 1, stock: 1) }
        let remote = MockRemoteCollectionService(collection: products, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "kept", persistence: nil, clock: ManualClock())
        await engine.startListening()
        engine.stopListening(clearCaches: false)  // nothing changes the engine from here on
        #expect(engine.currentCollection.count == 1_000)
        let models = engine.core.snapshot.models
        #expect(engine.core.published.withLock { $0.shown } != nil)
        engine.core.queue.sync { engine.core.publish() }
        #expect(engine.core.snapshot.models.sharesStorage(with: models))
        #expect(engine.core.published.withLock { $0.shown } != nil, "kept across a publish that changed nothing shown")
        try await engine.deleteDocument(id: "p0000")
        #expect(engine.core.published.withLock { $0.shown } == nil, "a change of the models makes it anew")
        #expect(!engine.core.snapshot.models.sharesStorage(with: models))
        #expect(engine.currentCollection.count == 999)
    }

    @Test("a thousand changes over ten thousand documents: each snapshot shows exactly its state")
    func snapshotsOverManyDocuments() async throws {
        let items = (0..<10_000).map { Product(id: String(format: "p%05d", $0), name: "n\($0)", price: Double($0), stock: 1) }
        let remote = MockRemoteCollectionService(collection: items, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "many", persistence: nil, clock: ManualClock())
        await engine.startListening()
        remote.store.goOffline()
        var expected = items
        var held: [(EngineSnapshot<Product>, [Product])] = []
        var random = SeededRandomNumberGenerator(seed: 7)
        for step in 0..<1_000 {
            let index = Int.random(in: 0..<expected.count, using: &random)
            if step % 3 == 0 {
                try await engine.deleteDocument(id: expected[index].id)
                expected.remove(at: index)
            } else {
                var changed = expected[index]
                changed.price = Double(20_000 + step)
                try await engine.saveDocument(changed)
                expected[index] = changed
            }
            if step % 100 == 0 { held.append((engine.core.snapshot, expected)) }
        }
        #expect(engine.currentCollection == expected)
        for (snapshot, state) in held { #expect(snapshot.shown == state) }
        #expect(engine.pendingWrites.count == 1_000)
    }
}

@Suite("Chunked lists")
struct ChunkedListTests {
    @Test("random inserts, removals, replacements and searches agree with an array, across splits and merges")
    func agreesWithArray() {
        var random = SeededRandomNumberGenerator(seed: 42)
        var list = ChunkedList<Int>()
        var array: [Int] = []
        for step in 0..<20_000 {
            let roll = Int.random(in: 0..<10, using: &random)
            if roll < 5 || array.isEmpty {
                let index = Int.random(in: 0...array.count, using: &random)
                list.insert(step, at: index)
                array.insert(step, at: index)
            } else if roll < 8 {
                let index = Int.random(in: 0..<array.count, using: &random)
                #expect(list.remove(at: index) == array.remove(at: index))
            } else if roll < 9 {
                let index = Int.random(in: 0..<array.count, using: &random)
                list[index] = -step
                array[index] = -step
            } else {
                list.append(step)
                array.append(step)
            }
            if step % 1_000 == 0 {
                #expect(Array(list) == array)
                #expect(list.array == array)
                let lower = Int.random(in: 0...array.count, using: &random)
                let upper = Int.random(in: lower...array.count, using: &random)
                #expect(list.elements(in: lower..<upper) == Array(array[lower..<upper]))
                #expect(list.chunks.allSatisfy { !$0.isEmpty })
            }
        }
        #expect(Array(list) == array)
        #expect(list.count == array.count)
        #expect(list.chunks.count > 1)

        let sorted = ChunkedList((0..<5_000).map { $0 * 2 })
        for sought in [-1, 0, 1, 511, 512, 513, 9_998, 9_999, 10_000] {
            #expect(sorted.partitionIndex { $0 < sought } == (0..<5_000).map { $0 * 2 }.firstIndex { $0 >= sought } ?? 5_000)
        }
        #expect(ChunkedList<Int>().partitionIndex { $0 < 3 } == 0)
    }

    @Test("an adopted array is shared until the first change, which cuts it into chunks")
    func adoption() {
        let count = 8 * ChunkedList<Int>.chunkSize
        let array = Array(0..<count)
        var list = ChunkedList(adopting: array)
        #expect(list.chunks.count == 1 && list.array == array)
        list.insert(-1, at: count / 2)
        var expected = array
        expected.insert(-1, at: count / 2)
        #expect(list.chunks.count > 1 && list.array == expected && array.count == count)
        var removed = ChunkedList(adopting: array)
        removed.remove(at: 0)
        #expect(Array(removed) == Array(array.dropFirst()))
        var replaced = ChunkedList(adopting: array)
        replaced[count - 1] = 0
        #expect(replaced.last == 0 && replaced.chunks.count > 1)
    }

    @Test("a copy shares the chunks a change does not touch")
    func copiesShare() {
        var list = ChunkedList(0..<10_000)
        let copy = list
        list[5_000] = -1
        #expect(copy[5_000] == 5_000 && list[5_000] == -1)
        let shared = zip(copy.chunks, list.chunks).filter { first, second in
            first.withUnsafeBufferPointer { a in second.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
        }
        #expect(shared.count == list.chunks.count - 1)
    }

    @Test("two versions of a list tell where they differ, looking into changed chunks alone; lists of other counts are not compared")
    func differingIndices() {
        var list = ChunkedList(0..<10_000)
        let copy = list
        #expect(list.differingIndices(from: copy, where: !=) == [])
        list[5_000] = -1
        list[9_999] = -2
        // Chunks that share storage are skipped without a look: a comparison that says every
        // element differs finds only the two changed chunks' elements.
        #expect(list.differingIndices(from: copy, where: !=) == [5_000, 9_999])
        let looked = list.differingIndices(from: copy, where: { _, _ in true }) ?? []
        #expect(looked.contains(5_000) && looked.contains(9_999) && looked.count < 2 * 2 * ChunkedList<Int>.chunkSize)
        // Cut differently (an adopted array against chunks): element by element.
        let adopted = ChunkedList(adopting: Array(0..<10_000))
        #expect(adopted.differingIndices(from: list, where: !=) == [5_000, 9_999])
        list.insert(7, at: 3)
        #expect(list.differingIndices(from: copy, where: !=) == nil)
    }
}

@Suite("What changed between two snapshots")
struct ChangedShownPositionsTests {
    @Test("a query view's shown positions whose model changed since an older snapshot; nil once a document came, went or moved")
    func changedPositions() async throws {
        let products = (0..<2_000).map { Product(id: String(format: "p%04d", $0), name: "n", price: Double($0), stock: 1) }
        let remote = MockRemoteCollectionService(collection: products, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "changed-positions", persistence: nil, clock: ManualClock())
        await engine.startListening { $0.whereField("price", isGreaterThanOrEqualTo: 100).order(by: "price", descending: true).limit(to: 1_000) }
        remote.store.goOffline()
        let base = engine.core.snapshot
        #expect(engine.core.snapshot.changedShownPositions(since: base) == [])
        // The shown order is by price, descending, from 1999: p1500 is at position 499.
        try await engine.updateDocument(id: "p1500", data: ["name": .value("renamed")])
        try await engine.updateDocument(id: "p1998", data: ["stock": .value(2)])
        let after = engine.core.snapshot
        #expect(after.changedShownPositions(since: base) == [1, 499])
        #expect(after.shownDocument(at: 499).model.name == "renamed" && after.shownDocument(at: 499).path.id == "p1500")
        // A change outside the window is not a shown position.
        try await engine.updateDocument(id: "p0500", data: ["name": .value("unseen")])
        #expect(engine.core.snapshot.changedShownPositions(since: after) == [])
        // A move (an order field changed) is not told position by position.
        try await engine.updateDocument(id: "p1200", data: ["price": .value(5_000)])
        #expect(engine.core.snapshot.changedShownPositions(since: after) == nil)
        // Without a query: path order.
        let plain = CollectionSyncEngine<Product>(remote: MockRemoteCollectionService(collection: products, collectionPath: { "products" }), managerKey: "changed-plain",
                                                  persistence: nil, clock: ManualClock())
        await plain.startListening()
        let first = plain.core.snapshot
        try await plain.updateDocument(id: "p0007", data: ["name": .value("seven")])
        #expect(plain.core.snapshot.changedShownPositions(since: first) == [7])
        try await plain.deleteDocument(id: "p0001")
        #expect(plain.core.snapshot.changedShownPositions(since: first) == nil)
    }
}

@Suite("The local view's list of pending writes")
struct LocalViewEntriesTests {
    @Test("stays the outbox's entries through writes, merges, batches, sends, acknowledgements and rejections")
    func entriesFollowTheOutbox() {
        var random = SeededRandomNumberGenerator(seed: 3)
        var view = LocalView(base: [], outbox: Outbox(clientID: "c"), now: Date())
        let paths = (0..<8).map { try! DocumentPath("things/t\($0)") }
        for step in 0..<3_000 {
            let path = paths[Int.random(in: 0..<paths.count, using: &random)]
            switch Int.random(in: 0..<6, using: &random) {
            case 0, 1:
                _ = view.enqueue(Mutation(path: path, kind: .set(["n": .int(step)])), now: Date())
            case 2:
                _ = view.enqueue(Mutation(path: path, kind: .merge(["n": .int(step)], fields: nil)), now: Date())
            case 3:
                _ = view.enqueue(batch: [Mutation(path: path, kind: .delete), Mutation(path: paths[0], kind: .set([:]))], now: Date())
            case 4:
                view.markAttempted(first: Int.random(in: 0...3, using: &random))
            default:
                guard let entry = view.outbox.entries.randomElement(using: &random) else { continue }
                if Bool.random(using: &random) {
                    view.acknowledge(entry, result: nil, version: Version(UInt64(step)), now: Date())
                } else {
                    view.removeEntry(entry.id, now: Date())
                }
            }
            #expect(Array(view.entries) == Array(view.outbox.entries))
        }
    }
}

@Suite("The local view and a batch's echo")
struct LocalViewBatchEchoTests {
    @Test("a batch that writes one document twice: its commit's echo confirms both writes, and the first write's acknowledgement never moves the view back")
    func batchWritingOneDocumentTwice() throws {
        let path = try DocumentPath("counters/c")
        let start = Document(path: path, data: ["n": 18], version: 275)
        let now = Date()
        // Echo first, then the acknowledgements; and the acknowledgements first, then the echo.
        for echoFirst in [true, false] {
            var view = LocalView(base: [start], outbox: Outbox(clientID: "me"), now: now)
            let batch = view.enqueue(batch: [
                Mutation(path: path, kind: .update([]), transforms: [Mutation.Transform("n", .increment(1))]),
                Mutation(path: path, kind: .update([]), transforms: [Mutation.Transform("n", .increment(2))]),
            ], now: now)
            #expect(view.documents[path]?.data["n"] == 21)
            // The server applies both in one commit at version 276: 19 after the first, 21 after the second.
            let final = Document(path: path, data: ["n": 21], version: 276)
            let echo = RemoteChangeBatch(isSnapshot: false, changes: [RemoteChange(path: path, document: final, version: 276, mutationID: batch[1].id)], version: 276)
            let acknowledge = {
                view.acknowledge(batch[0], result: Document(path: path, data: ["n": 19], version: 276), version: 276, now: now)
                #expect(view.documents[path]?.data["n"] == 21, "after the first acknowledgement")
                view.acknowledge(batch[1], result: final, version: 276, now: now)
            }
            if echoFirst {
                _ = view.applyRemote(echo, now: now)
                #expect(view.documents[path]?.data["n"] == 21, "the first write is not applied again on top of the commit")
                acknowledge()
            } else {
                acknowledge()
                _ = view.applyRemote(echo, now: now)
            }
            #expect(view.documents[path]?.data["n"] == 21)
            #expect(view.base[path]?.data["n"] == 21)
            #expect(view.outbox.isEmpty)
        }
    }
}

/// Records the resume version of each change applied, and fails the ones it is told to.
private final class RecordingPersistence: LocalCollectionPersistence {
    let applied = Locked<[UInt64]>([])
    let failing: Set<UInt64>
    init(failing: Set<UInt64> = []) { self.failing = failing }
    func load() throws -> LocalCollectionState? { nil }
    func create(clientID: String) throws -> LocalCollectionState { LocalCollectionState(outbox: Outbox(clientID: clientID)) }
    func apply(_ change: LocalCollectionChange) throws {
        let version = change.resumeVersion?.rawValue ?? 0
        if failing.contains(version) { throw TandemError(.dataLoss, "disk full at \(version)") }
        applied.withLock { $0.append(version) }
    }
    func clear() throws {}
    func space(for user: String) throws -> any LocalCollectionPersistence { RecordingPersistence() }
    func lastUser() throws -> String? { nil }
    func setLastUser(_ user: String?) throws {}
}

@Suite("Cache writer")
struct CacheWriterTests {
    func change(_ version: UInt64) -> LocalCollectionChange {
        var change = LocalCollectionChange()
        change.resumeVersion = Version(version)
        return change
    }

    @Test("queued changes are written in order, before a change a caller waits for; a failed one is told and the rest still written")
    func order() async throws {
        let persistence = RecordingPersistence(failing: [3])
        let failures = Locked<[String]>([])
        let writer = CacheWriter { error in failures.withLock { $0.append("\(error)") } }
        for version in UInt64(1)...50 where version != 25 {
            writer.enqueue(.collection(persistence, change(version)))
        }
        try writer.run(.collection(persistence, change(100)))
        let written = persistence.applied.withLock { $0 }
        let expected: [UInt64] = (1...50).filter { $0 != 3 && $0 != 25 } + [100]
        #expect(written == expected)
        let told: [String] = failures.withLock { $0 }
        #expect(told.count == 1 && told[0].contains("disk full at 3"))
        // A change the caller waits for that fails is thrown to it.
        #expect(throws: TandemError.self) { try writer.run(.collection(RecordingPersistence(failing: [7]), change(7))) }
        // Queued alone, changes are written in the background; flush waits for them.
        writer.enqueue(.collection(persistence, change(101)))
        writer.enqueue(.collection(persistence, change(102)))
        writer.flush()
        #expect(persistence.applied.withLock { Array($0.suffix(2)) } == [101, 102])
    }
}

extension SyncCore {
    /// Runs `body` on the calling thread while a step of the engine's executor is held running:
    /// whatever `body` reads must not wait for it.
    func whileOwnerBusy<Result>(_ body: () -> Result) -> Result {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        queue.enqueue {
            entered.signal()
            release.wait()
        }
        entered.wait()
        defer { release.signal() }
        return body()
    }
}
