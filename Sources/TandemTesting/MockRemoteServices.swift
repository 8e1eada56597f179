import Foundation
import Tandem
import TandemCore

/// Turns models into documents under a collection, for the mocks' initializers.
func mockDocuments<T: SyncModel>(_ models: [T], in collection: String) -> [Document] {
    models.compactMap { model in
        guard let path = try? DocumentPath("\(collection)/\(model.id)"), let data = try? JSONValueEncoder().encodeObject(model) else { return nil }
        return Document(path: path, data: data)
    }
}

/// A `RemoteCollectionService` over a ``MockServer``: a `TandemRemoteCollectionService` on the
/// mock's in-process client, so writes, listeners and faults behave as against a real server.
///
/// ```swift
/// let remote = MockRemoteCollectionService(collection: Product.mocks)
/// remote.store.goOffline()
/// ```
public final class MockRemoteCollectionService: RemoteCollectionService, ReachabilityReporting, MockServerBacked {
    /// The mock server behind this remote: inject faults with it, write as another client would,
    /// or share it with other mocks.
    public let store: MockServer
    private let remote: TandemRemoteCollectionService

    /// - Parameters:
    ///   - collection: models stored at the start.
    ///   - collectionPath: re-read on every call; nil means "not available now".
    ///   - store: the server to share with other mocks; a new one by default. `collection` is
    ///     written to it either way.
    public init<T: SyncModel>(collection: [T] = [], collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: MockServer? = nil) {
        let documents = mockDocuments(collection, in: collectionPath() ?? "mocks")
        self.store = store.map { $0.seeded(documents) } ?? MockServer(documents: documents)
        remote = TandemRemoteCollectionService(client: self.store.client, collectionPath: collectionPath)
    }

    /// An empty collection at `collectionPath`.
    public convenience init(collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: MockServer? = nil) {
        self.init(collection: [MockModel](), collectionPath: collectionPath, store: store)
    }

    public func collectionPath() throws -> CollectionPath { try remote.collectionPath() }
    public func getDocuments(query: Query) async throws -> [Document] { try await remote.getDocuments(query: query) }
    public func getDocument(id: String) async throws -> Document? { try await remote.getDocument(id: id) }
    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        remote.listen(query: query, resumeFrom: resumeFrom)
    }
    public func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        remote.listenDocument(id: id, resumeFrom: resumeFrom)
    }
    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await remote.commit(mutations) }
    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] { await remote.commit(requests: requests) }
    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        remote.observeConnection(handler)
    }
    public func wakeConnection() { remote.wakeConnection() }
}

/// A `RemoteDocumentService` over a ``MockServer``.
///
/// ```swift
/// let remote = MockRemoteDocumentService(
///     document: UserModel(id: "ada", name: "Ada", visits: 0), collectionPath: { "users" })
/// let engine = DocumentSyncEngine<UserModel>(remote: remote, managerKey: "user", persistence: nil)
/// try remote.simulateUpdate(UserModel(id: "ada", name: "Ada L.", visits: 1))
/// ```
public final class MockRemoteDocumentService: RemoteDocumentService, ReachabilityReporting, MockServerBacked {
    /// The mock server behind this remote: inject faults with it, write as another client would,
    /// or share it with other mocks.
    public let store: MockServer
    private let remote: TandemRemoteDocumentService

    /// - Parameters:
    ///   - document: a model stored at the start; none by default.
    ///   - collectionPath: re-read on every call; nil means "not available now".
    ///   - store: the server to share with other mocks; a new one by default. `document` is
    ///     written to it either way.
    public init<T: SyncModel>(document: T? = nil, collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: MockServer? = nil) {
        let documents = mockDocuments(document.map { [$0] } ?? [], in: collectionPath() ?? "mocks")
        self.store = store.map { $0.seeded(documents) } ?? MockServer(documents: documents)
        remote = TandemRemoteDocumentService(client: self.store.client, collectionPath: collectionPath)
    }

    /// A remote with no document stored at the start, at `collectionPath`.
    public convenience init(collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: MockServer? = nil) {
        self.init(document: MockModel?.none, collectionPath: collectionPath, store: store)
    }

    public func collectionPath() throws -> CollectionPath { try remote.collectionPath() }
    public func getDocument(id: String) async throws -> Document? { try await remote.getDocument(id: id) }
    public func listen(documentID: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        remote.listen(documentID: documentID, resumeFrom: resumeFrom)
    }
    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await remote.commit(mutations) }
    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] { await remote.commit(requests: requests) }
    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        remote.observeConnection(handler)
    }
    public func wakeConnection() { remote.wakeConnection() }
}

/// A read-only `RemoteCollectionGroupService` over a ``MockServer``.
///
/// ```swift
/// let store = MockServer(documents: [
///     Document(path: try DocumentPath("products/p1/reviews/r1"), data: ["rating": 5]),
///     Document(path: try DocumentPath("shops/s1/reviews/r3"), data: ["rating": 3]),
/// ])
/// let remote = MockRemoteCollectionGroupService(groupName: "reviews", store: store)
/// ```
public final class MockRemoteCollectionGroupService: RemoteCollectionGroupService, ReachabilityReporting {
    /// The mock server behind this remote: write to it as another client would, inject faults, or
    /// share it with other mocks.
    public let store: MockServer
    private let remote: TandemRemoteCollectionGroupService
    public var groupName: String { remote.groupName }

    /// Models are stored under `parents/p{n}/{groupName}`, alternating two parents.
    public init<T: SyncModel>(collection: [T] = [], groupName: String = "mocks", store: MockServer? = nil) {
        let documents = collection.enumerated().flatMap { index, model in
            mockDocuments([model], in: "parents/p\(index % 2)/\(groupName)")
        }
        self.store = store.map { $0.seeded(documents) } ?? MockServer(documents: documents)
        remote = TandemRemoteCollectionGroupService(client: self.store.client, groupName: groupName)
    }

    /// An empty group over `store`.
    public convenience init(groupName: String = "mocks", store: MockServer? = nil) {
        self.init(collection: [MockModel](), groupName: groupName, store: store)
    }

    public func getDocuments(query: Query) async throws -> [Document] { try await remote.getDocuments(query: query) }
    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        remote.listen(query: query, resumeFrom: resumeFrom)
    }
    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        remote.observeConnection(handler)
    }
    public func wakeConnection() { remote.wakeConnection() }
}

/// A model for mocks made without one.
struct MockModel: SyncModel {
    var id: String
}

/// What the collection-backed mocks share: a mock server and a collection path.
public protocol MockServerBacked: Sendable {
    /// The mock server the remote reads and writes.
    var store: MockServer { get }
    /// The remote's collection now; throws when it has none (`unavailable`) or its path is invalid.
    func collectionPath() throws -> CollectionPath
}

extension MockServerBacked {
    /// Writes a model as another client would.
    public func simulateUpdate<T: SyncModel>(_ model: T) throws {
        store.simulateWrite(Document(path: try collectionPath().document(model.id), data: try JSONValueEncoder().encodeObject(model)))
    }

    /// Deletes a document as another client would.
    public func simulateDelete(id: String) throws {
        store.simulateDelete(try collectionPath().document(id))
    }
}

extension MockServer {
    /// This server with `documents` written to it (as one commit), for a mock that shares it.
    func seeded(_ documents: [Document]) -> MockServer {
        if !documents.isEmpty { _ = try? commit(documents.map { .set($0.path, $0.data) }) }
        return self
    }
}
