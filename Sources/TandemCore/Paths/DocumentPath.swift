/// The path of a document: an even number of segments, `collection/id[/subcollection/id…]`.
///
/// ```swift
/// let review = try DocumentPath("products/p1/reviews/r9")
/// review.id               // "r9"
/// review.parent           // products/p1/reviews
/// review.collectionGroup  // "reviews"
/// ```
public struct DocumentPath: ResourcePath {
    private let core: PathCore

    /// Parses and validates a document path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) { core = try PathCore(parsing: path, as: .document) }

    /// A document path from its segments.
    public init(segments: [String]) throws(TandemError) { core = try PathCore(checking: segments, as: .document) }

    init(core: PathCore) { self.core = core }

    /// A path Tandem itself wrote and validated before (a cache row): split, with only the checks
    /// that keep `id` and `parent` safe (an even, non-zero number of segments); nil otherwise.
    package init?(trusted path: String) {
        let segments = PathRules.splitAtSlashes(path)
        guard !segments.isEmpty, segments.count % 2 == 0 else { return nil }
        core = PathCore(unchecked: segments, joined: path)
    }

    /// The segments, from the root collection down.
    public var segments: [String] { core.segments }

    /// The document's id: its last segment.
    public var id: String { core.last }

    /// The collection that holds the document.
    public var parent: CollectionPath { CollectionPath(core: core.parent) }

    /// The name of the document's collection group: the last segment of its collection.
    public var collectionGroup: String { core.segments[core.segments.count - 2] }

    /// A subcollection of this document.
    public func collection(_ id: String) throws(TandemError) -> CollectionPath {
        try CollectionPath(core: core.appending(id, as: .collection))
    }

    /// The slash-separated form.
    public var description: String { core.joined }
}
