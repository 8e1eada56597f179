/// A path to a field inside a document: `address.city` is the `city` field of the `address` map.
///
/// A key that itself contains a dot (or a backtick) is quoted with backticks; inside them, `\`
/// escapes the next character. This is the field `c` inside the field named `a.b`:
///
/// ```
/// `a.b`.c
/// ```
///
/// Or build the path from its segments: `FieldPath(["a.b", "c"])`.
public struct FieldPath: Sendable, Hashable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The keys from the top of the document down.
    public let segments: [String]
    /// The text of a string literal that did not parse; such a path is rejected where it is used.
    private let invalidLiteral: String?

    /// A path from its keys; no key may be empty.
    public init(_ segments: [String]) throws(TandemError) {
        guard !segments.isEmpty else {
            throw TandemError.invalidArgument("A field path needs at least one key.")
        }
        if segments.contains(where: \.isEmpty) {
            throw TandemError.invalidArgument("Field path \(segments) has an empty key; every key must be non-empty.")
        }
        self.segments = segments
        self.invalidLiteral = nil
    }

    /// Parses a dotted path such as `address.city`, with keys that hold a dot in backticks (see
    /// ``FieldPath``).
    public init(dotted: String) throws(TandemError) {
        try self.init(Self.parse(dotted))
    }

    /// A path from a string literal. An invalid literal is kept as one key and rejected where it is
    /// used, with `invalid-argument`.
    public init(stringLiteral value: String) {
        if let parsed = try? FieldPath(dotted: value) {
            self = parsed
        } else {
            self.segments = [value]
            self.invalidLiteral = value
        }
    }

    /// Whether every key is non-empty, which a literal path may not be.
    public var isValid: Bool { invalidLiteral == nil && !segments.isEmpty && !segments.contains(where: \.isEmpty) }

    /// The dotted form, quoting keys that need it.
    public var description: String {
        if let invalidLiteral { return invalidLiteral }
        return segments.map { segment in
            let needsQuotes = segment.contains(where: { $0 == "." || $0 == "`" || $0 == "\\" })
            guard needsQuotes else { return segment }
            var quoted = "`"
            for character in segment {
                if character == "`" || character == "\\" { quoted.append("\\") }
                quoted.append(character)
            }
            return quoted + "`"
        }.joined(separator: ".")
    }

    /// Whether `other` is this path or lies inside it (`a` is a prefix of `a.b`).
    public func isPrefix(of other: FieldPath) -> Bool {
        segments.count <= other.segments.count && zip(segments, other.segments).allSatisfy(==)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            self = try FieldPath(dotted: text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    static func parse(_ text: String) throws(TandemError) -> [String] {
        var segments: [String] = []
        var current = ""
        var quoted = false
        var escaping = false
        var segmentWasQuoted = false
        for character in text {
            if escaping {
                current.append(character)
                escaping = false
                continue
            }
            if quoted {
                if character == "\\" {
                    escaping = true
                } else if character == "`" {
                    quoted = false
                } else {
                    current.append(character)
                }
                continue
            }
            switch character {
            case "`":
                quoted = true
                segmentWasQuoted = true
            case ".":
                if current.isEmpty && !segmentWasQuoted {
                    throw TandemError.invalidArgument("Field path '\(text)' has an empty key; remove the extra '.' or quote the key with backticks.")
                }
                segments.append(current)
                current = ""
                segmentWasQuoted = false
            default:
                current.append(character)
            }
        }
        if quoted || escaping {
            throw TandemError.invalidArgument("Field path '\(text)' has an unterminated backtick quote.")
        }
        if current.isEmpty {
            throw TandemError.invalidArgument("Field path '\(text)' is empty or ends with '.'; name a field such as 'address.city'.")
        }
        segments.append(current)
        return segments
    }
}
