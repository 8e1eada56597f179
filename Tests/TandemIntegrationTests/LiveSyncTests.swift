import Foundation
import Synchronization
import Testing
@_spi(Testing) import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// Engines and clients against a real server on 127.0.0.1, over real WebSockets.
@Suite("Live sync over the real server", .timeLimit(.minutes(5)))
struct LiveSyncTests {
    let notes = collectionPath("notes")

    func engine(_ client: TandemClient, key: String, persistence: (any LocalCollectionPersistence)? = nil) -> CollectionSyncEngine<Note> {
        CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: client, collection: notes), managerKey: key, persistence: persistence)
    }

    @Test("two clients see each other's writes")
    func twoClients() async throws {
        let server = try await LiveServer.start()
        let a = RunningClient(server, id: "client-a")
        let b = RunningClient(server, id: "client-b")
        let engineA = engine(a.client, key: "a")
        let engineB = engine(b.client, key: "b")
        await a.client.waitUntilConnected()
        await b.client.waitUntilConnected()
        await engineA.startListening()
        await engineB.startListening()

        try await engineA.saveDocument(Note(id: "1", text: "from A"))
        #expect(await engineB.waitUntil { engineB.getDocument(id: "1")?.text == "from A" })
        try await engineB.updateDocument(id: "1", data: ["n": .increment(5)])
        try await engineB.saveDocument(Note(id: "2", text: "from B"))
        #expect(await engineA.waitUntil { engineA.getDocument(id: "1")?.n == 5 && engineA.getDocument(id: "2") != nil })
        #expect(!engineA.hasPendingWrites && !engineB.hasPendingWrites)
        #expect(try await server.store.document(at: documentPath("notes/1"))?.data["n"] == 5)

        await a.stop()
        await b.stop()
        await server.stop()
    }

    @Test("a snapshot of many frames comes whole to a listener, and into an engine's SQLite cache in pieces")
    func manyFrames() async throws {
        let server = try await LiveServer.start()
        let ids = (0..<1_200).map { "n\(String(10_000 + $0).dropFirst())" }
        for start in stride(from: 0, to: ids.count, by: 400) {
            _ = try await server.store.commit(ids[start..<start + 400].map { .set(documentPath("notes/\($0)"), ["text": .string("note \($0)"), "n": 0]) })
        }
        let client = RunningClient(server, id: "many-frames")
        await client.client.waitUntilConnected()
        let recorder = BatchRecorder()
        let listening = Task { for try await batch in client.client.listen(.collection(notes, Query())) { recorder.append(batch) } }
        #expect(await recorder.wait { $0.count == 1 })
        #expect(recorder.batches.first?.isSnapshot == true)
        #expect(recorder.batches.first?.changes.map(\.path.id) == ids)
        listening.cancel()

        let directory = TemporaryDirectory()
        let synced = engine(client.client, key: "many", persistence: try SQLiteCollectionPersistence(managerKey: "many", directory: directory.url))
        await synced.startListening()
        #expect(synced.currentCollection.map(\.id) == ids)
        #expect(synced.getDocument(id: "n0777")?.text == "note n0777")
        let cached = try #require(try SQLiteCollectionPersistence(managerKey: "many", directory: directory.url).load())
        #expect(cached.documents.map(\.path.id) == ids)
        #expect(cached.resumeVersion == 3)
        // The engine goes on live from there, into the same cache.
        _ = try await server.store.commit([.delete(documentPath("notes/n0000"))])
        #expect(await synced.waitUntil { synced.currentCollection.count == 1_199 })
        #expect(try SQLiteCollectionPersistence(managerKey: "many", directory: directory.url).load()?.documents.count == 1_199)

        await client.stop()
        await server.stop()
    }

    @Test("an offline client's queued writes replay after reconnect, in order, into a SQLite cache")
    func offlineReplay() async throws {
        let server = try await LiveServer.start()
        let directory = TemporaryDirectory()
        let b = RunningClient(server, id: "client-b")
        let engineB = engine(b.client, key: "b", persistence: try SQLiteCollectionPersistence(managerKey: "b", directory: directory.url))
        await b.client.waitUntilConnected()
        await engineB.startListening()

        b.client.setOnline(false)
        #expect(!b.client.isConnected)
        for index in 1...5 {
            try await engineB.saveDocument(Note(id: "\(index)", text: "offline \(index)"))
        }
        try await engineB.updateDocument(id: "1", data: ["n": .increment(1)])
        #expect(engineB.currentCollection.count == 5)
        #expect(engineB.hasPendingWrites)
        #expect(try await server.store.currentVersion() == 0)

        b.client.setOnline(true)
        #expect(await engineB.waitUntil { !engineB.hasPendingWrites })
        let feed = try await server.store.changes(since: 0, in: nil, limit: 100)
        // One commit per queued write, in the order they were made (the update merged into the
        // set of note 1 only if that set had not been sent yet).
        let order = feed.changes.sorted { $0.version < $1.version }.map(\.path.id)
        #expect(order.filter { $0 != "1" } == ["2", "3", "4", "5"])
        #expect(try await server.store.document(at: documentPath("notes/1"))?.data == ["id": "1", "text": "offline 1", "n": 1])
        #expect(try await server.store.read(.collection(notes, Query())).documents.count == 5)

        await b.stop()
        await server.stop()
    }

    @Test("a connection dropped after commit and before the acknowledgement applies an increment once")
    func droppedAcknowledgement() async throws {
        let server = try await LiveServer.start()
        _ = try await server.store.commit([.set(documentPath("notes/c"), ["id": "c", "text": "counter", "n": 0])])
        let a = RunningClient(server, id: "client-a")
        let engineA = engine(a.client, key: "a")
        await a.client.waitUntilConnected()
        await engineA.startListening()

        a.client.dropNextAcknowledgement()
        try await engineA.updateDocument(id: "c", data: ["n": .increment(1)])
        // The server applied it; the answer was lost with the connection; the replay gets the original.
        #expect(await engineA.waitUntil { !engineA.hasPendingWrites })
        #expect(a.client.connectionAttempts >= 2)
        #expect(try await server.store.document(at: documentPath("notes/c"))?.data["n"] == 1)
        #expect(await engineA.waitUntil { engineA.getDocument(id: "c")?.n == 1 })
        #expect(engineA.rejectedWrites.isEmpty)

        await a.stop()
        await server.stop()
    }

    @Test("a listener that reconnects misses nothing and sees nothing twice")
    func listenerResume() async throws {
        let server = try await LiveServer.start()
        let writer = RunningClient(server, id: "writer")
        let reader = RunningClient(server, id: "reader")
        await writer.client.waitUntilConnected()
        await reader.client.waitUntilConnected()
        let recorder = BatchRecorder()
        let listening = Task {
            for try await batch in reader.client.listen(.collection(notes, Query())) { recorder.append(batch) }
        }
        #expect(await recorder.wait { $0.count >= 1 })  // the empty snapshot
        for index in 1...3 {
            _ = try await writer.client.commit([.set(documentPath("notes/\(index)"), ["text": "v1"])])
        }
        #expect(await recorder.wait { BatchRecorder.documentIDs($0) == ["1", "2", "3"] })

        reader.client.setOnline(false)
        #expect(!reader.client.isConnected)
        let before = recorder.count
        _ = try await writer.client.commit([.set(documentPath("notes/4"), ["text": "v1"])])
        _ = try await writer.client.commit([.set(documentPath("notes/1"), ["text": "v2"]), .delete(documentPath("notes/2"))])
        _ = try await writer.client.commit([.set(documentPath("notes/5"), ["text": "v1"])])
        reader.client.setOnline(true)
        #expect(await recorder.wait { BatchRecorder.documentIDs($0) == ["1", "3", "4", "5"] })

        let resumed = recorder.batches.dropFirst(before)
        #expect(resumed.allSatisfy { !$0.isSnapshot })
        let changes = resumed.flatMap(\.changes)
        #expect(changes.map(\.path.id).sorted() == ["1", "2", "4", "5"])  // each change once, none from before
        let versions = recorder.batches.map(\.version)
        #expect(versions == versions.sorted())
        listening.cancel()
        await writer.stop()
        await reader.stop()
        await server.stop()
    }

    @Test("a document engine follows one document on the server, writes to it offline and back, and sees it deleted")
    func documentEngine() async throws {
        let server = try await LiveServer.start()
        let directory = TemporaryDirectory()
        let a = RunningClient(server, id: "client-a")
        let b = RunningClient(server, id: "client-b")
        let profile = DocumentSyncEngine<Note>(remote: TandemRemoteDocumentService(client: a.client, collection: notes), managerKey: "profile",
                                               persistence: FileDocumentPersistence(managerKey: "profile", directory: directory.url))
        let others = engine(b.client, key: "b")
        await a.client.waitUntilConnected()
        await b.client.waitUntilConnected()
        await others.startListening()
        try await profile.startListening(documentId: "me")
        #expect(profile.currentDocument == nil)

        try await others.saveDocument(Note(id: "me", text: "hello"))
        #expect(await profile.waitUntil { profile.currentDocument?.text == "hello" })
        try await profile.updateDocument(data: ["n": .increment(2)])
        #expect(await profile.waitUntil { !profile.hasPendingWrites })
        #expect(await others.waitUntil { others.getDocument(id: "me")?.n == 2 })

        a.client.setOnline(false)
        #expect(!a.client.isConnected)
        try await profile.updateDocument(data: ["text": "written offline", "n": .increment(1)])
        #expect(profile.currentDocument?.text == "written offline" && profile.hasPendingWrites)
        #expect(try await server.store.document(at: documentPath("notes/me"))?.data["text"] == "hello")
        a.client.setOnline(true)
        #expect(await profile.waitUntil { !profile.hasPendingWrites })
        #expect(await others.waitUntil { others.getDocument(id: "me")?.text == "written offline" })
        #expect(try await server.store.document(at: documentPath("notes/me"))?.data["n"] == 3)

        try await others.deleteDocument(id: "me")
        #expect(await profile.waitUntil { profile.currentDocument == nil })

        await a.stop()
        await b.stop()
        await server.stop()
    }

    @Test("a collection-group engine spans parents, with equal ids under different parents")
    func collectionGroup() async throws {
        let server = try await LiveServer.start()
        let a = RunningClient(server, id: "client-a")
        await a.client.waitUntilConnected()
        let reviews = CollectionGroupSyncEngine<Note>(remote: TandemRemoteCollectionGroupService(client: a.client, groupName: "reviews"), managerKey: "reviews", persistence: nil)
        await reviews.startListening { $0.order(by: "n") }
        _ = try await a.client.commit([
            .set(documentPath("products/lamp/reviews/r1"), ["id": "r1", "text": "bright", "n": 1]),
            .set(documentPath("products/desk/reviews/r1"), ["id": "r1", "text": "sturdy", "n": 2]),
            .set(documentPath("products/desk/notes/r9"), ["id": "r9", "text": "not a review", "n": 3]),
        ])
        #expect(await reviews.waitUntil { reviews.currentDocuments.count == 2 })
        #expect(reviews.currentDocuments.map(\.path.description).sorted() == ["products/desk/reviews/r1", "products/lamp/reviews/r1"])
        let fetched = try await a.client.documents(.collectionGroup("reviews", Query().whereField("n", isGreaterThan: 1)))
        #expect(fetched.map(\.path.description) == ["products/desk/reviews/r1"])
        await a.stop()
        await server.stop()
    }

    @Test("a running server prunes tombstones older than the retention on its own, on its interval of its clock")
    func prunesOnItsOwn() async throws {
        let clock = ManualClock()
        var storeConfiguration = SQLiteServerStoreConfiguration()
        storeConfiguration.tombstoneRetention = .zero
        storeConfiguration.pruneInterval = .seconds(3600)
        storeConfiguration.clock = clock
        let now = Locked(Date())
        storeConfiguration.now = { now.value }
        let server = try await LiveServer.start(storeConfiguration: storeConfiguration)
        _ = try await server.store.commit([.set(documentPath("notes/1"), ["text": "t"]), .set(documentPath("notes/2"), ["text": "t"])])
        _ = try await server.store.commit([.delete(documentPath("notes/1"))])
        // Not before the interval: the feed still starts at 0.
        await clock.waitForSleepers(count: 1)
        now.value = now.value.addingTimeInterval(1)
        clock.advance(by: .seconds(3599))
        #expect(try await server.store.changes(since: 0, in: nil, limit: 10).changes.count == 2)
        // At the interval it prunes, then sleeps again: by then the tombstone is gone.
        clock.advance(by: .seconds(1))
        await clock.waitForSleepers(count: 1)
        let pruned = await #expect(throws: TandemError.self) { _ = try await server.store.changes(since: 1, in: nil, limit: 10) }
        #expect(pruned?.code == .outOfRange)
        // From the beginning, still served: what exists now.
        #expect(try await server.store.changes(since: 0, in: nil, limit: 10).changes.map(\.path) == [documentPath("notes/2")])
        let feed = try await server.store.changes(since: 2, in: nil, limit: 10)
        #expect(feed.changes.isEmpty && feed.version == 2)
        #expect(try await server.store.document(at: documentPath("notes/2")) != nil)
        await server.stop()
    }

    @Test("a limited query listener follows documents moving in and out of its limit")
    func limitedListener() async throws {
        let server = try await LiveServer.start()
        let a = RunningClient(server, id: "client-a")
        await a.client.waitUntilConnected()
        let top = engine(a.client, key: "top")
        for index in 1...4 {
            _ = try await a.client.commit([.set(documentPath("notes/\(index)"), ["id": .string("\(index)"), "text": "t", "n": .int(index)])])
        }
        await top.startListening { $0.order(by: "n", descending: true).limit(to: 2) }
        #expect(top.currentCollection.map(\.id).sorted() == ["3", "4"])
        _ = try await a.client.commit([.delete(documentPath("notes/4"))])
        #expect(await top.waitUntil { top.currentCollection.map(\.id).sorted() == ["2", "3"] })
        _ = try await a.client.commit([.update(documentPath("notes/1"), fields: ["n": 10])])
        #expect(await top.waitUntil { top.currentCollection.map(\.id).sorted() == ["1", "3"] })
        await a.stop()
        await server.stop()
    }
}

/// Batches a listener received, in order.
final class BatchRecorder: Sendable {
    private let state = Locked<[RemoteChangeBatch]>([])
    func append(_ batch: RemoteChangeBatch) { state.withLock { $0.append(batch) } }
    var batches: [RemoteChangeBatch] { state.value }
    var count: Int { state.value.count }
    /// Returns once the batches received satisfy `ready`; false if the test's time limit came first.
    func wait(until ready: @escaping @Sendable ([RemoteChangeBatch]) -> Bool) async -> Bool { await state.wait(until: ready) }
    /// The documents present after applying every batch, by id.
    var documentIDs: [String] { Self.documentIDs(batches) }

    static func documentIDs(_ batches: [RemoteChangeBatch]) -> [String] {
        var present: [DocumentPath: Bool] = [:]
        for batch in batches {
            if batch.isSnapshot { present = [:] }
            for change in batch.changes { present[change.path] = change.document != nil }
        }
        return present.filter(\.value).map(\.key.id).sorted()
    }
}

@Suite("Resume and identity")
struct ResumeTests {
    @Test("a listener resuming from before pruned tombstones gets reset and a full snapshot; a recent one gets only changes")
    func resetAfterPruning() async throws {
        let server = try await LiveServer.start()
        let notes = collectionPath("notes")
        _ = try await server.store.commit([.set(documentPath("notes/1"), ["n": 1]), .set(documentPath("notes/2"), ["n": 2])])  // v1
        _ = try await server.store.commit([.delete(documentPath("notes/2"))])  // v2
        _ = try await server.store.commit([.set(documentPath("notes/3"), ["n": 3])])  // v3
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("resume"), "expected welcome")

        stream.send(.listen(id: 1, target: .collection(notes, Query()), resumeFrom: 1))
        guard case .batch(1, let recent, let reset, false)? = await stream.next() else { Issue.record("expected changes"); return }
        #expect(!recent.isSnapshot && !reset)
        #expect(recent.changes.map(\.path.id) == ["2", "3"] && recent.changes[0].document == nil)
        #expect(recent.version == 3)

        #expect(try await server.store.pruneTombstones(olderThan: Date().addingTimeInterval(60)) == 1)
        stream.send(.listen(id: 2, target: .collection(notes, Query()), resumeFrom: 1))
        guard case .batch(2, let full, let wasReset, false)? = await stream.next() else { Issue.record("expected a snapshot"); return }
        #expect(full.isSnapshot && wasReset)
        #expect(full.changes.map(\.path.id) == ["1", "3"])
        await stream.close()
        await server.stop()
    }

    @Test("a notify listener is told each commit's version and none of its changes, beside a full listener on the same connection; it resumes; a filtered target is refused")
    func notifyListener() async throws {
        let server = try await LiveServer.start()
        let notes = collectionPath("notes")
        _ = try await server.store.commit([.set(documentPath("notes/1"), ["n": 1])])  // v1
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("notify"), "expected welcome")
        /// The next batch for each listener, by id, whether they came in one message or several.
        func batches(_ count: Int) async -> [Int: RemoteChangeBatch] {
            var found: [Int: RemoteChangeBatch] = [:]
            while found.count < count {
                switch await stream.next() {
                case .batch(let target, let batch, _, _)?: found[target] = batch
                case .sharedBatch(let targets, let batch)?: for target in targets { found[target] = batch }
                case let other?: Issue.record("unexpected \(other)"); return found
                case nil: return found
                }
            }
            return found
        }
        stream.send(.listen(id: 1, target: .collection(notes, Query()), resumeFrom: nil, notify: true))
        var got = await batches(1)
        #expect(got[1]?.isSnapshot == true && got[1]?.changes == [] && got[1]?.version == 1)
        stream.send(.listen(id: 2, target: .collection(notes, Query()), resumeFrom: nil))
        got = await batches(1)
        #expect(got[2]?.changes.map(\.path.id) == ["1"])
        await server.waitForListeners(count: 2)
        _ = try await server.store.commit([.set(documentPath("notes/2"), ["n": 2]), .set(documentPath("notes/3"), ["n": 3])])  // v2
        got = await batches(2)
        #expect(got[1]?.changes == [] && got[1]?.version == 2 && got[1]?.isSnapshot == false)
        #expect(got[2]?.changes.map(\.path.id) == ["2", "3"] && got[2]?.version == 2)
        // Resumed: told of what changed since, by its version.
        stream.send(.listen(id: 3, target: .collection(notes, Query()), resumeFrom: 1, notify: true))
        got = await batches(1)
        #expect(got[3]?.changes == [] && got[3]?.version == 2 && got[3]?.isSnapshot == false)
        stream.send(.listen(id: 4, target: .collection(notes, Query().whereField("n", isEqualTo: 1)), resumeFrom: nil, notify: true))
        guard case .error(4, let refused)? = await stream.next() else { Issue.record("expected a filtered notify listen refused"); return }
        #expect(refused.code == .invalidArgument && refused.message.contains("no filters"))
        await stream.close()
        await server.stop()
    }

    @Test("a brief write is answered with versions only for what applied, and with the document for a refusal that met one")
    func briefWrite() async throws {
        let server = try await LiveServer.start()
        _ = try await server.store.commit([.set(documentPath("notes/1"), ["n": 1])])  // v1
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("brief"), "expected welcome")
        let id = MutationID(clientID: "brief-writer", sequence: 1)
        let writes: [Mutation] = [
            Mutation.set(documentPath("notes/2"), ["n": 2]).identified(by: id),
            Mutation.set(documentPath("notes/1"), ["n": 9]).requiring(.exists(false)).identified(by: MutationID(clientID: "brief-writer", sequence: 2)),
        ]
        stream.send(.writeEach(id: 5, mutations: writes, brief: true))
        guard case .ack(5, let answers)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(answers.map(\.status) == [.applied, .refused])
        #expect(answers[0].document == nil && answers[0].version == 2)
        #expect(answers[1].document?.data == ["n": 1], "the refusal carries the document it met")
        // Sent again: replayed, still brief; without brief, the document comes.
        stream.send(.writeEach(id: 6, mutations: [writes[0]], brief: true))
        guard case .ack(6, let again)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(again.map(\.status) == [.replayed] && again[0].document == nil)
        stream.send(.write(id: 7, mutations: [writes[0]]))
        guard case .ack(7, let full)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(full[0].document?.data == ["n": 2])
        await stream.close()
        await server.stop()
    }

    @Test("a client without a configured id makes one once and keeps it across launches")
    func persistentClientID() throws {
        let directory = TemporaryDirectory()
        var configuration = TandemClientConfiguration()
        configuration.storageDirectory = directory.url
        let first = TandemClient(url: URL(string: "http://127.0.0.1:1")!, configuration: configuration)
        let second = TandemClient(url: URL(string: "http://127.0.0.1:1")!, configuration: configuration)
        #expect(!first.clientID.isEmpty)
        #expect(first.clientID == second.clientID)
        let other = TemporaryDirectory()
        configuration.storageDirectory = other.url
        #expect(TandemClient(url: URL(string: "http://127.0.0.1:1")!, configuration: configuration).clientID != first.clientID)
    }
}

@Suite("Shared delivery", .timeLimit(.minutes(5)))
struct SharedDeliveryTests {
    @Test("listeners of one connection that get the same commit share one message, and each sees it once")
    func sharedDelivery() async throws {
        let server = try await LiveServer.start()
        let client = RunningClient(server, id: "many-listeners")
        await client.client.waitUntilConnected()
        let notes = collectionPath("notes")
        let recorders = (0..<4).map { _ in BatchRecorder() }
        let targets: [ListenTarget] = [
            .collection(notes, Query()),
            .collection(notes, Query()),
            .collection(notes, Query().whereField("n", isGreaterThan: 1)),
            .document(documentPath("notes/2")),
        ]
        var tasks: [Task<Void, any Error>] = []
        for (target, recorder) in zip(targets, recorders) {
            tasks.append(Task { for try await batch in client.client.listen(target) { recorder.append(batch) } })
        }
        for recorder in recorders { #expect(await recorder.wait { $0.count == 1 }) }
        _ = try await client.client.commit([.set(documentPath("notes/1"), ["n": 1]), .set(documentPath("notes/2"), ["n": 2])])
        for recorder in recorders { #expect(await recorder.wait { $0.count == 2 }) }
        #expect(recorders[0].documentIDs == ["1", "2"] && recorders[1].documentIDs == ["1", "2"])
        #expect(recorders[2].documentIDs == ["2"])
        #expect(recorders[3].documentIDs == ["2"])
        _ = try await client.client.commit([.set(documentPath("notes/3"), ["n": 0])])
        #expect(await recorders[0].wait { $0.count == 3 })
        #expect(await recorders[1].wait { $0.count == 3 })
        #expect(recorders[0].batches.last?.changes.map(\.path.id) == ["3"])
        #expect(recorders[2].count == 2 && recorders[3].count == 2)  // neither is affected
        tasks.forEach { $0.cancel() }
        await client.stop()
        await server.stop()
    }
}

/// What an engine dropped without `stopListening()` leaves on a real server.
@Suite("Engine lifecycle against the real server")
struct LiveLifecycleTests {
    @Test("an engine dropped without stopListening: the server sees its listener leave", .timeLimit(.minutes(5)))
    func droppedEngineLeaves() async throws {
        let server = try await LiveServer.start()
        let running = RunningClient(server, id: "dropping")
        await running.client.waitUntilConnected()
        let remote = TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes"))
        var engine: CollectionSyncEngine<Note>? = CollectionSyncEngine(remote: remote, managerKey: "dropped", persistence: nil)
        await engine?.startListening()
        await server.waitForListeners(count: 1)
        let other = CollectionSyncEngine<Note>(remote: remote, managerKey: "kept", persistence: nil)
        await other.startListening { $0.whereField("text", isEqualTo: "kept") }
        await server.waitForListeners(count: 2)
        engine = nil
        // Only the dropped engine's listener goes; the other engine's stays and still syncs.
        await server.waitForListeners(count: 1)
        try await other.saveDocument(Note(id: "k", text: "kept"))
        #expect(try await server.store.document(at: documentPath("notes/k")) != nil)
        #expect(server.listenerCount == 1)
        await running.stop()
        await server.stop()
    }

    @Test("streams start their listener when iterated, not when made, and stop when the iterator goes", .timeLimit(.minutes(5)))
    func streamsStartOnIteration() async throws {
        let server = try await LiveServer.start()
        let running = RunningClient(server, id: "streams")
        await running.client.waitUntilConnected()
        let remote = TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes"))
        let engine = CollectionSyncEngine<Note>(remote: remote, managerKey: "streams", persistence: nil)
        try await engine.saveDocument(Note(id: "a", text: "first"))

        let collection = engine.streamCollection()
        let document = engine.streamDocument(id: "a")
        let (updates, deletions) = engine.streamCollectionUpdates()
        // Made, not iterated: nothing listens. The engine's own listener is not started either.
        #expect(server.listenerCount == 0)

        do {
            var iterator = collection.makeAsyncIterator()
            #expect(try await iterator.next()?.map(\.id) == ["a"])
            await server.waitForListeners(count: 1)
            var documentIterator = document.makeAsyncIterator()
            #expect(try await documentIterator.next()??.text == "first")
            await server.waitForListeners(count: 2)
        }
        // Both iterators went: both listeners leave.
        await server.waitForListeners(count: 0)

        // The pair shares one listener, which stays while either side is iterated.
        var updatesIterator: SyncStream<Note>.Iterator? = updates.makeAsyncIterator()
        #expect(try await updatesIterator?.next()?.id == "a")
        await server.waitForListeners(count: 1)
        var deletionsIterator: SyncStream<String>.Iterator? = deletions.makeAsyncIterator()
        updatesIterator = nil
        // The deletions side still gets what the shared listener sees.
        try await engine.deleteDocument(id: "a")
        #expect(try await deletionsIterator?.next() == "a")
        #expect(server.listenerCount == 1)
        deletionsIterator = nil
        await server.waitForListeners(count: 0)
        _ = (updatesIterator, deletionsIterator)

        await running.stop()
        await server.stop()
    }
}
