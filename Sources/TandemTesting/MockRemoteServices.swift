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

/// Resolves a collection-path closure, or throws the engines' `unavailable` error.
func resolveCollection(_ provider: @Sendable () -> String?) throws -> CollectionPath {
    guard let text = provider() else {
        throw TandemError(.unavailable, "The collection path is not available now (its closure returned nil); try again once it is, e.g. after sign-in.")
    }
    return try CollectionPath(text)
}

/// A ``RemoteCollectionService`` over an ``InMemoryDocumentStore``: writes apply for real (an
/// update merges fields), with the store's fault injection.
///
/// ```swift
/// let remote = MockRemoteCollectionService(collection: Product.mocks)
/// remote.store.goOffline()
/// ```
public final class MockRemoteCollectionService: RemoteCollectionService, InMemoryCollectionBacked {
    public let store: InMemoryDocumentStore
    private let path: @Sendable () -> String?

    /// - Parameters:
    ///   - collection: models stored at the start.
    ///   - collectionPath: re-read on every call; nil means "not available now".
    public init<T: SyncModel>(collection: [T] = [], collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: InMemoryDocumentStore? = nil) {
        let initialPath = collectionPath() ?? "mocks"
        self.store = store ?? InMemoryDocumentStore(documents: mockDocuments(collection, in: initialPath))
        self.path = collectionPath
    }

    /// An empty collection at `collectionPath`.
    public convenience init(collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: InMemoryDocumentStore? = nil) {
        self.init(collection: [MockModel](), collectionPath: collectionPath, store: store)
    }

    public func collectionPath() throws -> CollectionPath { try resolveCollection(path) }

    public func getDocuments(query: Query) async throws -> [Document] {
        try await store.query(.collection(collectionPath()), query)
    }

    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        do {
            return store.listen(.collection(try collectionPath()), query: query, resumeFrom: resumeFrom)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    public func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        do {
            return store.listen(.document(try collectionPath().document(id)), query: Query(), resumeFrom: resumeFrom)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

}

/// A ``RemoteDocumentService`` over an ``InMemoryDocumentStore``.
public final class MockRemoteDocumentService: RemoteDocumentService, InMemoryCollectionBacked {
    public let store: InMemoryDocumentStore
    private let path: @Sendable () -> String?

    public init<T: SyncModel>(document: T? = nil, collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: InMemoryDocumentStore? = nil) {
        let initialPath = collectionPath() ?? "mocks"
        self.store = store ?? InMemoryDocumentStore(documents: mockDocuments(document.map { [$0] } ?? [], in: initialPath))
        self.path = collectionPath
    }

    public convenience init(collectionPath: @escaping @Sendable () -> String? = { "mocks" }, store: InMemoryDocumentStore? = nil) {
        self.init(document: MockModel?.none, collectionPath: collectionPath, store: store)
    }

    public func collectionPath() throws -> CollectionPath { try resolveCollection(path) }

    public func listen(documentID: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        do {
            return store.listen(.document(try collectionPath().document(documentID)), query: Query(), resumeFrom: resumeFrom)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

}

/// A read-only ``RemoteCollectionGroupService`` over an ``InMemoryDocumentStore``.
public final class MockRemoteCollectionGroupService: RemoteCollectionGroupService {
    public let store: InMemoryDocumentStore
    public let groupName: String

    /// Models are stored under `parents/p{n}/{groupName}`, alternating two parents.
    public init<T: SyncModel>(collection: [T] = [], groupName: String = "mocks", store: InMemoryDocumentStore? = nil) {
        self.groupName = groupName
        let documents = collection.enumerated().flatMap { index, model in
            mockDocuments([model], in: "parents/p\(index % 2)/\(groupName)")
        }
        self.store = store ?? InMemoryDocumentStore(documents: documents)
    }

    /// An empty group over `store`.
    public convenience init(groupName: String = "mocks", store: InMemoryDocumentStore? = nil) {
        self.init(collection: [MockModel](), groupName: groupName, store: store)
    }

    public func getDocuments(query: Query) async throws -> [Document] {
        try await store.query(.group(groupName), query)
    }

    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        store.listen(.group(groupName), query: query, resumeFrom: resumeFrom)
    }
}

/// A model for mocks made without one.
struct MockModel: SyncModel {
    var id: String
}

/// What the collection-backed mocks share: an in-memory store and a collection path.
public protocol InMemoryCollectionBacked: Sendable {
    var store: InMemoryDocumentStore { get }
    func collectionPath() throws -> CollectionPath
}

extension InMemoryCollectionBacked {
    public func getDocument(id: String) async throws -> Document? {
        try await store.get(collectionPath().document(id))
    }

    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] {
        try await store.commit(mutations)
    }

    /// Writes a model as another client would.
    public func simulateUpdate<T: SyncModel>(_ model: T) throws {
        store.simulateWrite(Document(path: try collectionPath().document(model.id), data: try JSONValueEncoder().encodeObject(model)))
    }

    /// Deletes a document as another client would.
    public func simulateDelete(id: String) throws {
        store.simulateDelete(try collectionPath().document(id))
    }
}
