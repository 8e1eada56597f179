/// One change the server reports to a listener: a document written (its new state) or removed.
public struct RemoteChange: Sendable, Hashable {
    /// The path of the document that changed.
    public var path: DocumentPath
    /// The document as committed; nil when it was deleted.
    public var document: Document?
    /// The version of the commit.
    public var version: Version
    /// The client write that made the change, when the server reports it: a client recognizes the
    /// echo of its own pending write by it.
    public var mutationID: MutationID?
    /// The document's data exactly as the wire carried it (compact JSON of an object), when a reader
    /// kept it: a cache can store it as it is instead of encoding the data again. Not part of
    /// equality: it spells `document.data`.
    package var encodedData: String?

    /// A change from its parts: `document` nil for a removal. `upsert(_:)` and
    /// `removal(_:version:)` build the common ones.
    public init(path: DocumentPath, document: Document?, version: Version, mutationID: MutationID? = nil) {
        self.path = path
        self.document = document
        self.version = version
        self.mutationID = mutationID
    }

    public static func == (lhs: RemoteChange, rhs: RemoteChange) -> Bool {
        lhs.path == rhs.path && lhs.version == rhs.version && lhs.mutationID == rhs.mutationID && lhs.document == rhs.document
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(version)
        hasher.combine(mutationID)
        hasher.combine(document)
    }

    /// A document written.
    public static func upsert(_ document: Document) -> RemoteChange {
        RemoteChange(path: document.path, document: document, version: document.version)
    }

    /// A document deleted at `version`.
    public static func removal(_ path: DocumentPath, version: Version) -> RemoteChange {
        RemoteChange(path: path, document: nil, version: version)
    }
}

/// What a listener receives: a complete snapshot first (and again after a reset), then the changes of
/// each commit, never half of one. `version` is the resume point after the batch.
public struct RemoteChangeBatch: Sendable, Hashable {
    /// Whether the batch holds every document the listener covers, replacing what the cache had.
    public var isSnapshot: Bool
    /// The documents written or removed; for a snapshot, every document the listener covers.
    public var changes: [RemoteChange]
    /// The version the listener has seen everything up to, once this batch is applied.
    public var version: Version
    /// A piece of a batch: more of its changes follow in the stream's next element, and nothing of it
    /// may be applied before the piece where this is false. Only Tandem's own remote services
    /// deliver pieces (so an engine can decode a large snapshot while the rest arrives); a stream
    /// that ends after a piece drops the batch.
    package var continues = false

    /// A batch from its parts: whether it is a snapshot, its changes, and the version it reaches.
    public init(isSnapshot: Bool, changes: [RemoteChange], version: Version) {
        self.isSnapshot = isSnapshot
        self.changes = changes
        self.version = version
    }
}
