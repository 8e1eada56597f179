/// The path of a document: an even number of segments, `collection/id[/subcollection/id…]`.
///
/// ```swift
/// let review = try DocumentPath("products/p1/reviews/r9")
/// review.id               // "r9"
/// review.parent           // products/p1/reviews
/// review.collectionGroup  // "reviews"
/// ```
public struct DocumentPath: ResourcePath {
    /// The segments, from the root collection down.
    public let segments: [String]
    /// The slash-separated form, kept so hashing, equality and `description` cost one string.
    private let joined: String

    /// Parses and validates a document path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) {
        (segments, joined) = try PathKind.document.parse(path)
    }

    /// A document path from its segments.
    public init(segments: [String]) throws(TandemError) {
        (self.segments, joined) = try PathKind.document.check(segments)
    }

    init(unchecked segments: [String]) {
        self.segments = segments
        self.joined = segments.joined(separator: "/")
    }

    init(unchecked segments: [String], joined: String) {
        self.segments = segments
        self.joined = joined
    }

    /// A path Tandem itself wrote and validated before (a cache row): split, with only the checks
    /// that keep `id` and `parent` safe (an even, non-zero number of segments); nil otherwise.
    package init?(trusted path: String) {
        let segments = PathRules.splitAtSlashes(path)
        guard !segments.isEmpty, segments.count % 2 == 0 else { return nil }
        self.segments = segments
        self.joined = path
    }

    /// The document's id: its last segment.
    public var id: String { segments[segments.count - 1] }

    /// The collection that holds the document.
    public var parent: CollectionPath {
        let cut = joined.utf8.count - segments[segments.count - 1].utf8.count - 1
        return CollectionPath(unchecked: Array(segments.dropLast()), joined: String(joined.utf8.prefix(cut))!)
    }

    /// The name of the document's collection group: the last segment of its collection.
    public var collectionGroup: String { segments[segments.count - 2] }

    /// A subcollection of this document.
    public func collection(_ id: String) throws(TandemError) -> CollectionPath {
        try CollectionPath(segments: segments + [id])
    }

    /// The slash-separated form.
    public var description: String { joined }
}
