import TandemCore

/// A ``RemoteCollectionService`` on a Tandem server, through a ``TandemClient``: a
/// `CollectionSyncEngine` given one syncs with the server unchanged.
///
/// ```swift
/// let remote = TandemRemoteCollectionService(client: client, collection: try CollectionPath("todos"))
/// let todos = CollectionSyncEngine<Todo>(remote: remote, managerKey: "todos")
/// ```
public struct TandemRemoteCollectionService: RemoteCollectionService, ReachabilityReporting {
    /// The client the calls go through.
    public let client: TandemClient
    private let path: @Sendable () throws -> CollectionPath

    /// A fixed collection.
    public init(client: TandemClient, collection: CollectionPath) {
        self.client = client
        self.path = { collection }
    }

    /// A collection read on every call (one that follows the signed-in user, say); throw
    /// `unavailable` when there is none.
    public init(client: TandemClient, collection: @escaping @Sendable () throws -> CollectionPath) {
        self.client = client
        self.path = collection
    }

    /// The seed's shape, as the mocks take it: a path read on every call, nil when there is none
    /// now (before sign-in, say), which fails the call with `unavailable`.
    ///
    /// ```swift
    /// TandemRemoteCollectionService(client: client, collectionPath: { session.uid.map { "users/\($0)/todos" } })
    /// ```
    public init(client: TandemClient, collectionPath: @escaping @Sendable () -> String?) {
        self.init(client: client) { try CollectionPath.resolve(collectionPath) }
    }

    public func collectionPath() throws -> CollectionPath { try path() }

    public func getDocuments(query: Query) async throws -> [Document] {
        try await client.documents(.collection(try path(), query))
    }

    public func getDocument(id: String) async throws -> Document? {
        try await client.document(at: try path().document(id))
    }

    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        do {
            return client.listen(.collection(try path(), query), resumeFrom: resumeFrom, failWhenDisconnected: true, inPieces: true)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    public func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        do {
            return client.listen(.document(try path().document(id)), resumeFrom: resumeFrom, failWhenDisconnected: true)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] {
        try await client.commit(mutations)
    }

    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        await client.commit(requests: requests)
    }

    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        client.observeConnection(handler)
    }

    public func wakeConnection() { client.wakeConnection() }

    public var metrics: ClientMetrics? { client.configuration.metrics }

    public func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation? {
        client.usesCredentials ? client.observeAuthState(handler) : nil
    }
}

/// A ``RemoteDocumentService`` on a Tandem server, for a `DocumentSyncEngine`.
public struct TandemRemoteDocumentService: RemoteDocumentService, ReachabilityReporting {
    let collection: TandemRemoteCollectionService

    /// The documents of a fixed collection.
    public init(client: TandemClient, collection: CollectionPath) {
        self.collection = TandemRemoteCollectionService(client: client, collection: collection)
    }

    /// The documents of a collection read on every call (one that follows the signed-in user, say);
    /// throw `unavailable` when there is none.
    public init(client: TandemClient, collection: @escaping @Sendable () throws -> CollectionPath) {
        self.collection = TandemRemoteCollectionService(client: client, collection: collection)
    }

    /// The seed's shape: a collection path read on every call, nil when there is none now.
    public init(client: TandemClient, collectionPath: @escaping @Sendable () -> String?) {
        self.collection = TandemRemoteCollectionService(client: client, collectionPath: collectionPath)
    }

    public func collectionPath() throws -> CollectionPath { try collection.collectionPath() }

    public func getDocument(id: String) async throws -> Document? { try await collection.getDocument(id: id) }

    public func listen(documentID: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        collection.listenDocument(id: documentID, resumeFrom: resumeFrom)
    }

    public func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { try await collection.commit(mutations) }

    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        await collection.commit(requests: requests)
    }

    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        collection.observeConnection(handler)
    }

    public func wakeConnection() { collection.wakeConnection() }

    public var metrics: ClientMetrics? { collection.metrics }

    public func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation? {
        collection.observeAuthState(handler)
    }
}

/// A ``RemoteCollectionGroupService`` on a Tandem server, for a `CollectionGroupSyncEngine`.
public struct TandemRemoteCollectionGroupService: RemoteCollectionGroupService, ReachabilityReporting {
    /// The client the calls go through.
    public let client: TandemClient
    public let groupName: String

    /// Every collection named `groupName` (such as `reviews`), under any parent.
    public init(client: TandemClient, groupName: String) {
        self.client = client
        self.groupName = groupName
    }

    public func getDocuments(query: Query) async throws -> [Document] {
        try await client.documents(.collectionGroup(groupName, query))
    }

    public func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        client.listen(.collectionGroup(groupName, query), resumeFrom: resumeFrom, failWhenDisconnected: true, inPieces: true)
    }

    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? {
        client.observeConnection(handler)
    }

    public func wakeConnection() { client.wakeConnection() }

    public var metrics: ClientMetrics? { client.configuration.metrics }

    public func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation? {
        client.usesCredentials ? client.observeAuthState(handler) : nil
    }
}

extension CollectionPath {
    /// The path a `() -> String?` provider gives now, or the `unavailable` error the engines expect
    /// when it gives none.
    package static func resolve(_ provider: @Sendable () -> String?) throws -> CollectionPath {
        guard let text = provider() else {
            throw TandemError(.unavailable, "The collection path is not available now (its closure returned nil); try again once it is, e.g. after sign-in.")
        }
        return try CollectionPath(text)
    }
}
