import Foundation
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// A window of writes, a batch of edits and a listener's stream belong to the showing of the space
/// they began in: after a switch, what arrives for the earlier one is dropped (logged). After
/// ada → bob → ada a window's answers are not the new sender's to settle, whose own window carries
/// the same writes.
@Suite("Space epochs", .timeLimit(.minutes(1)))
struct SpaceEpochTests {
    /// A remote that signs in as the test says, and holds each commit until the test opens its gate.
    final class GatedRemote: RemoteCollectionService, ReachabilityReporting {
        let inner: MockRemoteCollectionService
        let calls = WatchedValue(0)
        let opened = WatchedValue<Set<Int>>([])
        private let handler = Mutex<HandlerBox?>(nil)
        private let user = Mutex<String>("ada")
        final class HandlerBox: Sendable {
            let body: @Sendable (AuthState) -> Void
            init(_ body: @escaping @Sendable (AuthState) -> Void) { self.body = body }
        }

        init(_ inner: MockRemoteCollectionService) { self.inner = inner }
        func collectionPath() throws -> CollectionPath { try inner.collectionPath() }
        func getDocuments(query: Query) async throws -> [Document] { try await inner.getDocuments(query: query) }
        func getDocument(id: String) async throws -> Document? { try await inner.getDocument(id: id) }
        func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> { inner.listen(query: query, resumeFrom: resumeFrom) }
        func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
            inner.listenDocument(id: id, resumeFrom: resumeFrom)
        }
        func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await inner.commit(mutations) }
        func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
            var counted = 0
            calls.update { $0 += 1; counted = $0 }
            let call = counted
            await opened.wait { $0.contains(call) }
            // Its users are its own, not the client's: the client is not told whom they are for.
            return await inner.commit(requests: requests.map { request in
                var request = request
                request.madeFor = nil
                return request
            })
        }
        func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation? {
            self.handler.withLock { $0 = HandlerBox(handler) }
            handler(.signedIn(uid: user.withLock { $0 }))
            return ConnectionObservation { [weak self] in self?.handler.withLock { $0 = nil } }
        }
        func signIn(_ uid: String) {
            user.withLock { $0 = uid }
            handler.withLock { $0 }?.body(.signedIn(uid: uid))
        }
        func open(_ call: Int) { opened.update { $0.insert(call) } }
    }

    @Test("after ada → bob → ada with a window in flight, the old window's answers are dropped (logged), and the new window's settle its writes once")
    func oldWindowDropped() async throws {
        let server = MockServer()
        let remote = GatedRemote(MockRemoteCollectionService(collectionPath: { "products" }, store: server))
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, logger: logger, clock: ManualClock())
        await engine.core.queue.run {}
        #expect(engine.core.spaceUser == "ada")
        let saving = Task { try await engine.saveDocument(Product(id: "lamp", name: "Lamp", price: 20, stock: 1)) }
        // Ada's window is out, held at the server's door.
        await remote.calls.wait { $0 == 1 }
        remote.signIn("bob")
        remote.signIn("ada")
        // Ada's space shown again sends its write again, in a window of its new sender's.
        await remote.calls.wait { $0 == 2 }
        _ = try? await saving.value
        // The first window's answers arrive now: not this sender's. (Settled by it, as they were,
        // the event never comes, and the suite's time limit ends the test.)
        remote.open(1)
        #expect(await logger.wait(forEventNamed: "products_syncPendingWrites_otherSpace"))
        #expect(engine.hasPendingWrites, "the write waits for its own window's answer")
        remote.open(2)
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(engine.rejectedWrites.isEmpty)
        #expect(server.appliedWriteCount == 1, "applied once; the second window's request is answered as a replay")
        #expect(logger.events(named: "products_syncPendingWrites_otherSpace").count == 1)
        #expect(engine.getDocument(id: "lamp")?.price == 20)
    }

    @Test("a batch of writes made from one space and recorded after a switch to another is not recorded there: its ticket says so")
    func editFromEarlierSpaceRefused() async throws {
        let remote = GatedRemote(MockRemoteCollectionService(collectionPath: { "products" }, store: MockServer()))
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, logger: logger, clock: ManualClock())
        await engine.core.queue.run {}
        let adas = engine.core.spaceEpoch
        // The switch to Bob is queued on the engine's executor before the edit made from Ada's data.
        let gate = DispatchSemaphore(value: 0)
        engine.core.queue.enqueue { gate.wait() }
        remote.signIn("bob")
        let ticket = try engine.core.enqueueBatch([Mutation(path: try DocumentPath("products/lamp"), kind: .set(["name": "Lamp"]))], epoch: adas)
        gate.signal()
        let error = try #require(await ticket.recorded() as? TandemError)
        #expect(error.code == .aborted)
        #expect(engine.core.spaceUser == "bob")
        #expect(!engine.hasPendingWrites, "nothing of Ada's edit is in Bob's outbox")
        #expect(engine.getDocument(id: "lamp") == nil)
        #expect(logger.events(named: "products_batch_otherSpace").count == 1)
        // Made from Bob's data, it is recorded.
        let bobs = try engine.core.enqueueBatch([Mutation(path: try DocumentPath("products/lamp"), kind: .set(["id": "lamp", "name": "Lamp", "price": 20, "stock": 1]))], epoch: engine.core.spaceEpoch)
        #expect(await bobs.recorded() == nil)
        #expect(engine.getDocument(id: "lamp") != nil)
    }

    @Test("a listener batch that comes on a stream attached in an earlier space is dropped (logged), never applied to the space shown now")
    func batchFromEarlierSpaceDropped() async throws {
        let remote = GatedRemote(MockRemoteCollectionService(collectionPath: { "products" }, store: MockServer()))
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, logger: logger, clock: ManualClock())
        await engine.startListening()
        let adas = engine.core.currentAttachment()
        remote.signIn("bob")
        await engine.core.queue.run {}
        #expect(engine.core.spaceUser == "bob")
        let rug = Document(path: try DocumentPath("products/rug"), data: ["id": "rug", "name": "Rug", "price": 500, "stock": 1], version: 99)
        #expect(!engine.core.applyNow(RemoteChangeBatch(isSnapshot: false, changes: [.upsert(rug)], version: 99), prepared: nil, attachment: adas))
        #expect(engine.getDocument(id: "rug") == nil)
        #expect(logger.events(named: "products_listener_otherSpace").count == 1)
    }
}
