/// The path of a collection: an odd number of segments, `collection[/id/subcollection…]`.
///
/// ```swift
/// let reviews = try CollectionPath("products/p1/reviews")
/// reviews.parent            // products/p1
/// try reviews.document("r9") // products/p1/reviews/r9
/// ```
public struct CollectionPath: ResourcePath {
    /// The segments, from the root collection down.
    public let segments: [String]
    /// The slash-separated form, kept so hashing, equality and `description` cost one string.
    private let joined: String

    /// Parses and validates a collection path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) {
        (segments, joined) = try PathKind.collection.parse(path)
    }

    /// A collection path from its segments.
    public init(segments: [String]) throws(TandemError) {
        (self.segments, joined) = try PathKind.collection.check(segments)
    }

    init(unchecked segments: [String]) {
        self.segments = segments
        self.joined = segments.joined(separator: "/")
    }

    init(unchecked segments: [String], joined: String) {
        self.segments = segments
        self.joined = joined
    }

    /// The collection's id: its last segment, which is also its collection-group name.
    public var id: String { segments[segments.count - 1] }

    /// The collection-group name: every collection with this last segment belongs to the group.
    public var collectionGroup: String { id }

    /// The document that holds this subcollection, or nil for a root collection.
    public var parent: DocumentPath? {
        segments.count == 1 ? nil : DocumentPath(unchecked: Array(segments.dropLast()))
    }

    /// A document of this collection.
    public func document(_ id: String) throws(TandemError) -> DocumentPath {
        try DocumentPath(segments: segments + [id])
    }

    /// Whether a document lies directly in this collection.
    public func contains(_ document: DocumentPath) -> Bool {
        document.segments.count == segments.count + 1 && document.segments.starts(with: segments)
    }

    /// The slash-separated form.
    public var description: String { joined }
}
