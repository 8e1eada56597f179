/// What a collection's path and a document's share: validated segments, and a slash-separated
/// form that equality, hashing, order and coding all use, byte for byte, as the stores key
/// documents. ``CollectionPath`` (an odd number of segments) and ``DocumentPath`` (an even number)
/// are the two; code that takes either is generic over this.
///
/// ```swift
/// func depth(of path: some ResourcePath) -> Int { path.segments.count }
/// depth(of: try DocumentPath("users/ada"))          // 2
/// depth(of: try CollectionPath("users/ada/posts"))  // 3
/// ```
public protocol ResourcePath: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The segments, from the root collection down.
    var segments: [String] { get }
    /// Parses and validates a path; an invalid one throws `invalid-argument` naming the rule.
    init(_ path: String) throws(TandemError)
}

extension ResourcePath {
    /// Paths are equal when their bytes are, as the stores key documents: two spellings Swift
    /// calls equal (`é` precomposed and decomposed) are two paths.
    public static func == (lhs: Self, rhs: Self) -> Bool { PathRules.sameBytes(lhs.description, rhs.description) }

    /// Hashes the path's bytes.
    public func hash(into hasher: inout Hasher) { PathRules.hashBytes(description, into: &hasher) }

    /// Orders paths by their bytes, segment by segment.
    public static func < (lhs: Self, rhs: Self) -> Bool {
        PathRules.compareJoined(lhs.description, rhs.description) == .less
    }

    /// Decodes the slash-separated form, validated as ``init(_:)`` does.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            try self.init(text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    /// Encodes the slash-separated form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// What both path types hold, validated once: the segments and their slash-separated form, kept
/// so hashing, equality and `description` cost one string. ``CollectionPath`` and ``DocumentPath``
/// each wrap one and add what their kind means (a collection's documents, a document's parent).
struct PathCore: Sendable {
    let segments: [String]
    let joined: String

    /// Parses and validates `path` as `kind`.
    init(parsing path: String, as kind: PathKind) throws(TandemError) {
        (segments, joined) = try kind.parse(path)
    }

    /// Validates `segments` as `kind`.
    init(checking segments: [String], as kind: PathKind) throws(TandemError) {
        (self.segments, joined) = try kind.check(segments)
    }

    /// Segments already known valid (cut from a valid path), with their joined form when known.
    init(unchecked segments: [String], joined: String? = nil) {
        self.segments = segments
        self.joined = joined ?? segments.joined(separator: "/")
    }

    /// The last segment: a collection's id, or a document's.
    var last: String { segments[segments.count - 1] }

    /// Every segment but the last, as the parent path's core; its joined form is cut from this one's.
    var parent: PathCore {
        let cut = joined.utf8.count - last.utf8.count - 1
        return PathCore(unchecked: Array(segments.dropLast()), joined: String(joined.utf8.prefix(cut))!)
    }

    /// This path with one more segment, validated as `kind`.
    func appending(_ segment: String, as kind: PathKind) throws(TandemError) -> PathCore {
        try PathCore(checking: segments + [segment], as: kind)
    }
}

/// Which of the two a path is, and the parity of its segments.
enum PathKind {
    case collection, document

    var name: String { self == .collection ? "collection" : "document" }

    /// Parses and validates `path` as this kind: its segments, and its slash-separated form (the
    /// text itself unless it had a leading or trailing `/`).
    func parse(_ path: String) throws(TandemError) -> (segments: [String], joined: String) {
        let segments = try PathRules.segments(of: path, kind: name)
        return try checkParity(segments, original: path)
    }

    /// Validates `segments` as a path of this kind.
    func check(_ segments: [String]) throws(TandemError) -> (segments: [String], joined: String) {
        let original = segments.joined(separator: "/")
        try PathRules.validate(segments, original: original, kind: name)
        return try checkParity(segments, original: original)
    }

    private func checkParity(_ segments: [String], original: String) throws(TandemError) -> (segments: [String], joined: String) {
        switch self {
        case .collection where segments.count % 2 == 0:
            throw TandemError.invalidArgument("'\(original)' has \(segments.count) segments and names a document; a collection path has an odd number, like users or users/ada/posts.")
        case .document where segments.count % 2 == 1:
            throw TandemError.invalidArgument("'\(original)' has \(segments.count) segments and names a collection; a document path has an even number, like users/ada.")
        default:
            let bytes = original.utf8
            let joined = bytes.first == UInt8(ascii: "/") || bytes.last == UInt8(ascii: "/") ? segments.joined(separator: "/") : original
            return (segments, joined)
        }
    }
}
