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
