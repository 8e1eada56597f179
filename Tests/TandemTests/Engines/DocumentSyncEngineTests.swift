import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

struct UserModel: SyncModel, Equatable {
    var id: String
    var name: String
    var visits: Int
}

@Suite("DocumentSyncEngine", .timeLimit(.minutes(5)))
struct DocumentSyncEngineTests {
    func makeEngine(_ remote: MockRemoteDocumentService, persistence: (any LocalDocumentPersistence)? = nil, clock: ManualClock = ManualClock(),
                    logger: RecordingDataSyncLogger = RecordingDataSyncLogger()) -> DocumentSyncEngine<UserModel> {
        DocumentSyncEngine<UserModel>(remote: remote, managerKey: "user", persistence: persistence, logger: logger, clock: clock)
    }

    @Test("listens to a document, updates it by id or by default, and follows other clients")
    func listenAndWrite() async throws {
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = makeEngine(remote)
        #expect(engine.currentDocument == nil)
        #expect(throws: TandemError.self) { try engine.getDocumentOrThrow() }
        try await engine.startListening(documentId: "ada")
        #expect(engine.currentDocument?.name == "Ada")
        #expect(try engine.getDocumentId() == "ada")
        try await engine.updateDocument(data: ["visits": .increment(1)])
        #expect(engine.currentDocument?.visits == 1)
        try remote.simulateUpdate(UserModel(id: "ada", name: "Ada L.", visits: 1))
        #expect(await engine.waitUntil { engine.currentDocument?.name == "Ada L." })
        try await engine.deleteDocument()
        #expect(engine.currentDocument == nil)
        #expect(remote.store.documents.isEmpty)
    }

    @Test("switching ids keeps the previous document's pending writes")
    func switchingKeepsPendingWrites() async throws {
        let clock = ManualClock()
        let store = MockServer(documents: [
            Document(path: try DocumentPath("users/a"), data: ["id": "a", "name": "A", "visits": 0]),
            Document(path: try DocumentPath("users/b"), data: ["id": "b", "name": "B", "visits": 0]),
        ])
        let remote = MockRemoteDocumentService(collectionPath: { "users" }, store: store)
        let engine = makeEngine(remote, clock: clock)
        try await engine.startListening(documentId: "a")
        store.goOffline()
        try await engine.updateDocument(data: ["visits": .increment(5)])
        store.goOnline()
        try await engine.startListening(documentId: "b")
        #expect(engine.currentDocument?.id == "b")
        // The listener coming up sends the queued write at once.
        #expect(await engine.waitUntil { !engine.hasPendingWrites })
        #expect(store.documents[try DocumentPath("users/a")]?.data["visits"] == .int(5))
    }

    @Test("the document, its id and the outbox come back in a new engine before any network")
    func persistence() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        do {
            let engine = makeEngine(remote, persistence: FileDocumentPersistence(managerKey: "user", directory: directory.url))
            try await engine.startListening(documentId: "ada")
            remote.store.goOffline()
            try await engine.updateDocument(data: ["name": "Offline Ada"])
            engine.stopListening(clearCaches: false)
        }
        let relaunched = makeEngine(remote, persistence: FileDocumentPersistence(managerKey: "user", directory: directory.url))
        #expect(try relaunched.getDocumentId() == "ada")
        #expect(relaunched.currentDocument?.name == "Offline Ada")
        #expect(relaunched.pendingWrites.count == 1)
        remote.store.goOnline()
        try await relaunched.startListening(documentId: "ada")
        #expect(await relaunched.waitUntil { !relaunched.hasPendingWrites })
        #expect(remote.store.documents[try DocumentPath("users/ada")]?.data["name"] == "Offline Ada")
    }

    @Test("starting the same id again while the listener backs off starts it at once")
    func sameIDWakesBackoff() async throws {
        let clock = ManualClock()
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = makeEngine(remote, clock: clock)
        remote.store.failNextCalls(1)
        try await engine.startListening(documentId: "ada")
        #expect(engine.currentDocument == nil)
        await clock.waitForSleepers(count: 1)
        // The clock never moves: only the second start can bring the document.
        try await engine.startListening(documentId: "ada")
        #expect(engine.currentDocument?.name == "Ada")
        engine.stopListening()
    }

    @Test("each server copy of the document is pushed to the logger as high-priority user properties")
    func userProperties() async throws {
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = makeEngine(remote, logger: logger)
        try await engine.startListening(documentId: "ada")
        let pushed = logger.userProperties
        #expect(pushed.count == 1)
        #expect(pushed.first?.dict["id"] as? String == "ada" && pushed.first?.isHighPriority == true)
        engine.stopListening()
    }

    @Test("listener failures back off on the clock like the other engines")
    func backoff() async throws {
        let clock = ManualClock()
        let logger = RecordingDataSyncLogger()
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = makeEngine(remote, clock: clock, logger: logger)
        remote.store.failNextCalls(2)
        try await engine.startListening(documentId: "ada")
        await clock.waitForSleepers(count: 1)
        #expect(logger.retryDelays("user_listener_retrying") == [2])
        clock.advance(by: .seconds(2))
        await clock.waitForSleepers(count: 1)
        #expect(logger.retryDelays("user_listener_retrying") == [2, 4])
        clock.advance(by: .seconds(4))
        #expect(await engine.waitUntil { engine.currentDocument?.name == "Ada" })
        engine.stopListening()
    }
}
