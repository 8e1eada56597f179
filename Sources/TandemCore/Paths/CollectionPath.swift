/// The path of a collection: an odd number of segments, `collection[/id/subcollection…]`.
///
/// ```swift
/// let reviews = try CollectionPath("products/p1/reviews")
/// reviews.parent            // products/p1
/// try reviews.document("r9") // products/p1/reviews/r9
/// ```
public struct CollectionPath: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The segments, from the root collection down.
    public let segments: [String]
    /// The slash-separated form, kept so hashing, equality and `description` cost one string.
    private let joined: String

    /// Parses and validates a collection path; an invalid one throws `invalid-argument` naming the rule.
    public init(_ path: String) throws(TandemError) {
        let segments = try PathRules.segments(of: path, kind: "collection")
        try self.init(validatedSegments: segments, original: path)
    }

    /// A collection path from its segments.
    public init(segments: [String]) throws(TandemError) {
        let original = segments.joined(separator: "/")
        try PathRules.validate(segments, original: original, kind: "collection")
        try self.init(validatedSegments: segments, original: original)
    }

    private init(validatedSegments segments: [String], original: String) throws(TandemError) {
        guard segments.count % 2 == 1 else {
            throw TandemError.invalidArgument("'\(original)' has \(segments.count) segments and names a document; a collection path has an odd number, like users or users/ada/posts.")
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

    /// Paths are equal when their bytes are, as the stores key documents: two spellings Swift
    /// calls equal (`é` precomposed and decomposed) are two paths.
    public static func == (lhs: Self, rhs: Self) -> Bool { PathRules.sameBytes(lhs.joined, rhs.joined) }

    /// Hashes the path's bytes.
    public func hash(into hasher: inout Hasher) { PathRules.hashBytes(joined, into: &hasher) }

    public static func < (lhs: CollectionPath, rhs: CollectionPath) -> Bool {
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
