/// The path of a collection: an odd number of segments, `collection[/id/subcollection…]`.
///
/// ```swift
/// let reviews = try CollectionPath("products/p1/reviews")
/// reviews.parent            // products/p1
/// try reviews.document("r9") // products/p1/reviews/r9
/// ```
public struct CollectionPath: ResourcePath {
    private let core: PathCore

    /// Parses and validates a collection path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) { core = try PathCore(parsing: path, as: .collection) }

    /// A collection path from its segments.
    public init(segments: [String]) throws(TandemError) { core = try PathCore(checking: segments, as: .collection) }

    init(core: PathCore) { self.core = core }

    /// The segments, from the root collection down.
    public var segments: [String] { core.segments }

    /// The collection's id: its last segment, which is also its collection-group name.
    public var id: String { core.last }

    /// The collection-group name: every collection with this last segment belongs to the group.
    public var collectionGroup: String { id }

    /// The document that holds this subcollection, or nil for a root collection.
    public var parent: DocumentPath? {
        core.segments.count == 1 ? nil : DocumentPath(core: core.parent)
    }

    /// A document of this collection.
    public func document(_ id: String) throws(TandemError) -> DocumentPath {
        try DocumentPath(core: core.appending(id, as: .document))
    }

    /// Whether a document lies directly in this collection.
    public func contains(_ document: DocumentPath) -> Bool {
        document.segments.count == segments.count + 1 && document.segments.starts(with: segments)
    }

    /// The slash-separated form.
    public var description: String { core.joined }
}
