import Foundation
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// The listener's resume point belongs to the query that reached it: a relaunched engine listening
/// to the same query resumes from it, and concurrent starts attach one listener.
@Suite("Resume", .timeLimit(.minutes(5)))
struct ResumeTests {
    struct Item: SyncModel, Equatable {
        var id: String
        var n: Int
    }

    /// A remote that records every listen it is asked for, with its resume point.
    final class CountingRemote: RemoteCollectionService {
        let inner: MockRemoteCollectionService
        let listens = Mutex<[Version?]>([])
        init(_ inner: MockRemoteCollectionService) { self.inner = inner }
        func collectionPath() throws -> CollectionPath { try inner.collectionPath() }
        func getDocuments(query: Query) async throws -> [Document] { try await inner.getDocuments(query: query) }
        func getDocument(id: String) async throws -> Document? { try await inner.getDocument(id: id) }
        func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
            listens.withLock { $0.append(resumeFrom) }
            return inner.listen(query: query, resumeFrom: resumeFrom)
        }
        func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
            inner.listenDocument(id: id, resumeFrom: resumeFrom)
        }
        func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await inner.commit(mutations) }
        func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] { await inner.commit(requests: requests) }
        func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? { inner.observeConnection(handler) }
    }

    @Test("a cache dropped by stopListening() drops its saved resume point too: a relaunch listening to the same query loads every document again, not only what changed since")
    func clearedCacheForgetsResumePoint() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("items/a"), ["n": 1]), .set(try DocumentPath("items/b"), ["n": 2])])
        do {
            let engine = CollectionSyncEngine<Item>(remote: MockRemoteCollectionService(collectionPath: { "items" }, store: server), managerKey: "items",
                                                    persistence: try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url))
            await engine.startListening()
            #expect(engine.currentCollection.map(\.id) == ["a", "b"])
            engine.stopListening()
            await engine.core.barrier()
            engine.core.flushCache()
        }
        let saved = try #require(try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url).load())
        #expect(saved.documents.isEmpty && saved.resumeVersion == nil && saved.resumeQuery == nil, "the cache and its resume point went together")
        // A change after the stop: resumed from the old point, only it would come.
        _ = try await server.client.commit([.set(try DocumentPath("items/c"), ["n": 3])])

        let remote = CountingRemote(MockRemoteCollectionService(collectionPath: { "items" }, store: server))
        let relaunched = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url))
        await relaunched.startListening()
        #expect(remote.listens.withLock { $0 } == [nil], "a snapshot, not a resume")
        #expect(await relaunched.waitUntil { relaunched.currentCollection.map(\.id) == ["a", "b", "c"] })
    }

    @Test("a relaunched collection engine listening to the same query resumes from its saved version; another query starts from a snapshot")
    func relaunchResumes() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = MockServer()
        let query: (Query) -> Query = { $0.whereField("n", isGreaterThan: 0) }
        _ = try await server.client.commit([.set(try DocumentPath("items/a"), ["n": 1])])
        do {
            let remote = CountingRemote(MockRemoteCollectionService(collectionPath: { "items" }, store: server))
            let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url))
            await engine.startListening(buildQuery: query)
            #expect(engine.currentCollection.map(\.id) == ["a"])
            #expect(remote.listens.withLock { $0 } == [nil])
            engine.core.flushCache()
        }
        let saved = try #require(try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url).load()?.resumeVersion)
        _ = try await server.client.commit([.set(try DocumentPath("items/b"), ["n": 2])])

        let remote = CountingRemote(MockRemoteCollectionService(collectionPath: { "items" }, store: server))
        let relaunched = CollectionSyncEngine<Item>(remote: remote, managerKey: "items", persistence: try SQLiteCollectionPersistence(managerKey: "items", directory: directory.url))
        #expect(relaunched.currentCollection.map(\.id) == ["a"], "the cache shows at once")
        await relaunched.startListening(buildQuery: query)
        #expect(remote.listens.withLock { $0 } == [saved], "resumed from the saved version, not reloaded")
        #expect(await relaunched.waitUntil { relaunched.currentCollection.map(\.id) == ["a", "b"] })
        // Another query: the resume point is not its own.
        await relaunched.startListening { $0.whereField("n", isGreaterThan: 1) }
        #expect(remote.listens.withLock { $0.last } == .some(nil))
    }

    @Test("two starts at once with one query attach one listener, and both return once it has its first batch")
    func concurrentStartsAttachOnce() async throws {
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("items/a"), ["n": 1])])
        for round in 0..<40 {
            let remote = CountingRemote(MockRemoteCollectionService(collectionPath: { "items" }, store: server))
            let engine = CollectionSyncEngine<Item>(remote: remote, managerKey: "items-\(round)", persistence: nil)
            async let first: Void = engine.startListening()
            async let second: Void = engine.startListening()
            _ = await (first, second)
            #expect(engine.currentCollection.map(\.id) == ["a"])
            #expect(remote.listens.withLock { $0.count } == 1, "round \(round): \(remote.listens.withLock { $0 })")
            engine.stopListening()
        }
    }
}

extension ResumeTests {
    @Test("a new engine of a managerKey loads its cache only after a released one ran the steps asked of it: a stop that drops the cache lands before, never after, the new engine's own writes")
    func nextEngineWaitsForTheReleasedOne() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("items/a"), ["n": 1]), .set(try DocumentPath("items/b"), ["n": 2])])
        let persistence = { try SQLiteCollectionPersistence(managerKey: "handover", directory: directory.url) }
        let gate = DispatchSemaphore(value: 0)
        do {
            let first = CollectionSyncEngine<Item>(remote: MockRemoteCollectionService(collectionPath: { "items" }, store: server), managerKey: "handover", persistence: try persistence())
            await first.startListening()
            #expect(first.currentCollection.count == 2)
            await first.core.barrier()
            first.core.flushCache()
            // Its queue is held; the stop (dropping the cache) and its release wait behind.
            first.core.queue.enqueue { gate.wait() }
            first.stopListening()
        }
        // Whichever comes first: the new engine waiting for the released one, or the new engine made.
        let (events, event) = AsyncStream.makeStream(of: String.self)
        EngineHandover.onWait { if $0 == "handover" { event.yield("waited") } }
        defer { EngineHandover.onWait(nil) }
        let made = Task.detached {
            let engine = CollectionSyncEngine<Item>(remote: MockRemoteCollectionService(collectionPath: { "items" }, store: server), managerKey: "handover", persistence: try persistence())
            event.yield("made")
            return engine
        }
        var first: String?
        for await happened in events {
            first = happened
            break
        }
        gate.signal()
        let second = try await made.value
        #expect(first == "waited", "the new engine was made while the released one still had its stop to run")
        #expect(second.currentCollection.isEmpty, "loaded after the released engine dropped its cache")
        await second.startListening()
        #expect(await second.waitUntil { second.currentCollection.map(\.id) == ["a", "b"] })
    }
}

extension ResumeTests {
    @Test("a new engine of a managerKey made while an older one still lives (a task holds it) takes its cache and outbox over: the older one stops listening and sending, keeps nothing more on disk, and refuses writes with a reason; a write it was sending stays queued for the new one")
    func newEngineSupersedesALiveOne() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = MockServer()
        _ = try await server.client.commit([.set(try DocumentPath("items/a"), ["n": 1]), .set(try DocumentPath("items/b"), ["n": 2])])
        let persistence = { try SQLiteCollectionPersistence(managerKey: "takeover", directory: directory.url) }
        let remote = { MockRemoteCollectionService(collectionPath: { "items" }, store: server) }
        let first = CollectionSyncEngine<Item>(remote: remote(), managerKey: "takeover", persistence: try persistence())
        await first.startListening()
        #expect(first.currentCollection.count == 2)
        // A write on its way when the next engine comes: offline, it stays queued.
        server.goOffline()
        let writing = Task { try await first.updateDocument(id: "a", data: ["n": .increment(1)]) }
        #expect(await first.waitUntil { first.pendingWrites.count == 1 })

        let second = CollectionSyncEngine<Item>(remote: remote(), managerKey: "takeover", persistence: try persistence())
        // Loaded after the first let go: its documents, and its queued write.
        #expect(second.currentCollection.count == 2 && second.pendingWrites.count == 1)
        await first.core.barrier()
        #expect(first.core.isShutDown && !first.core.isListening)
        // Its caller hears it stays queued (returns, as an offline write does), not a refusal.
        try await writing.value
        do {
            try await first.updateDocument(id: "b", data: ["n": .increment(1)])
            Issue.record("a superseded engine took a write")
        } catch let error as TandemError {
            #expect(error.code == .failedPrecondition && error.message.contains("newer engine"))
        }
        // The new engine sends the write once it is online: applied once.
        server.goOnline()
        await second.startListening()
        #expect(await second.waitUntil { !second.hasPendingWrites && second.currentCollection.first { $0.id == "a" }?.n == 2 })
        #expect(try await server.client.document(at: try DocumentPath("items/a"))?.data["n"] == 2)
    }
}
