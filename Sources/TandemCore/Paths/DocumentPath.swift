/// The path of a document: an even number of segments, `collection/id[/subcollection/id…]`.
///
/// ```swift
/// let review = try DocumentPath("products/p1/reviews/r9")
/// review.id               // "r9"
/// review.parent           // products/p1/reviews
/// review.collectionGroup  // "reviews"
/// ```
public struct DocumentPath: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The segments, from the root collection down.
    public let segments: [String]
    /// The slash-separated form, kept so hashing, equality and `description` cost one string.
    private let joined: String

    /// Parses and validates a document path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) {
        let segments = try PathRules.segments(of: path, kind: "document")
        try self.init(validatedSegments: segments, original: path)
    }

    /// A document path from its segments.
    public init(segments: [String]) throws(TandemError) {
        let original = segments.joined(separator: "/")
        try PathRules.validate(segments, original: original, kind: "document")
        try self.init(validatedSegments: segments, original: original)
    }

    private init(validatedSegments segments: [String], original: String) throws(TandemError) {
        guard segments.count % 2 == 0 else {
            throw TandemError.invalidArgument("'\(original)' has \(segments.count) segments and names a collection; a document path has an even number, like users/ada.")
        }
        self.segments = segments
        let bytes = original.utf8
        self.joined = bytes.first == UInt8(ascii: "/") || bytes.last == UInt8(ascii: "/") ? segments.joined(separator: "/") : original
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

    /// Paths are equal when their bytes are, as the stores key documents: two spellings Swift
    /// calls equal (`é` precomposed and decomposed) are two paths.
    public static func == (lhs: Self, rhs: Self) -> Bool { PathRules.sameBytes(lhs.joined, rhs.joined) }

    /// Hashes the path's bytes.
    public func hash(into hasher: inout Hasher) { PathRules.hashBytes(joined, into: &hasher) }

    public static func < (lhs: DocumentPath, rhs: DocumentPath) -> Bool {
        PathRules.compareJoined(lhs.joined, rhs.joined) == .less
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            try self.init(text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
