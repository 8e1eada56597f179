import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// `snapshots()`: what an engine shows, with its changes and metadata, awaited as events.
@Suite("Engine snapshots")
struct EngineSnapshotsTests {
    @Test("a collection engine's snapshots: everything added first, then each local write, acknowledgement and server change", .timeLimit(.minutes(5)))
    func collectionSnapshots() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine.startListening { $0.order(by: "price") }
        var snapshots = engine.snapshots().makeAsyncIterator()

        let first = try #require(await snapshots.next())
        #expect(first.documents.map(\.id) == ["lamp", "desk"])
        #expect(first.documentChanges.map(\.kind) == [.added, .added])
        #expect(first.documentChanges.map(\.newIndex) == [0, 1])
        #expect(first.metadata == DocumentMetadata(hasPendingWrites: false, isFromCache: false))

        // A write queued offline shows at once, pending.
        remote.store.goOffline()
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        let pending = try #require(await snapshots.next())
        #expect(pending.documents.map(\.id) == ["lamp", "rug", "desk"])
        #expect(pending.documentChanges.map(\.kind) == [.added])
        #expect(pending.documentChanges.first?.document.id == "rug")
        #expect(pending.documentChanges.first?.newIndex == 1)
        #expect(pending.metadata.hasPendingWrites)

        // Acknowledged: the same documents, no longer pending.
        remote.store.goOnline()
        _ = try await engine.getCollectionAsync()  // a read wakes the sender
        var acknowledged = try #require(await snapshots.next())
        while acknowledged.metadata.hasPendingWrites { acknowledged = try #require(await snapshots.next()) }
        #expect(acknowledged.documents.map(\.id) == ["lamp", "rug", "desk"])
        #expect(!acknowledged.documentChanges.contains { $0.kind != .modified })

        // A server change: removed at its old index; the others only moved, so they are not reported.
        try remote.simulateDelete(id: "lamp")
        let removed = try #require(await snapshots.next())
        #expect(removed.documents.map(\.id) == ["rug", "desk"])
        #expect(removed.documentChanges.count == 1)
        #expect(removed.documentChanges.first?.kind == .removed)
        #expect(removed.documentChanges.first?.document.id == "lamp")
        #expect(removed.documentChanges.first?.oldIndex == 0)
        #expect(removed.documentChanges.first?.newIndex == nil)
        engine.stopListening(clearCaches: false)
    }

    @Test("a reader slower than the changes gets the latest state, its changes counted from what it read before", .timeLimit(.minutes(5)))
    func slowReader() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        remote.store.goOffline()
        var snapshots = engine.snapshots().makeAsyncIterator()
        let first = try #require(await snapshots.next())
        #expect(first.isEmpty && first.metadata.isFromCache)
        for n in 0..<5 {
            try await engine.saveDocument(Product(id: "p\(n)", name: "P", price: Double(n), stock: 1))
        }
        try await engine.deleteDocument(id: "p0")
        let latest = try #require(await snapshots.next())
        #expect(latest.documents.map(\.id) == ["p1", "p2", "p3", "p4"])
        #expect(latest.documentChanges.map(\.kind) == [.added, .added, .added, .added])
    }

    @Test("snapshots end when the engine goes", .timeLimit(.minutes(5)))
    func endsWithEngine() async throws {
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        var engine: CollectionSyncEngine<Product>? = CollectionSyncEngine(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine?.startListening()
        var snapshots = try #require(engine?.snapshots().makeAsyncIterator())
        #expect(await snapshots.next()?.count == 2)
        engine = nil
        #expect(await snapshots.next() == nil)
    }

    @Test("a document engine's snapshots follow its document, its metadata and the id listened to", .timeLimit(.minutes(5)))
    func documentSnapshots() async throws {
        let remote = MockRemoteDocumentService(document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
        let engine = DocumentSyncEngine<UserModel>(remote: remote, managerKey: "user", persistence: nil, clock: ManualClock())
        var snapshots = engine.snapshots().makeAsyncIterator()
        let before = try #require(await snapshots.next())
        #expect(before.id == nil && !before.exists)
        try await engine.startListening(documentId: "ada")
        var ada = try #require(await snapshots.next())
        while ada.document == nil || ada.metadata.isFromCache { ada = try #require(await snapshots.next()) }
        #expect(ada.id == "ada")
        #expect(ada.document?.name == "Ada")
        remote.store.goOffline()
        try await engine.updateDocument(data: ["visits": .increment(1)])
        let pending = try #require(await snapshots.next())
        #expect(pending.document?.visits == 1)
        #expect(pending.metadata.hasPendingWrites)
    }
}
