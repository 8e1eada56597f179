/// A point in a database's commit sequence. The server stamps every committed write with the next
/// version; a change token is a version.
///
/// An integer literal is a version. A version precondition makes a write apply only to the state it
/// was based on:
///
/// ```swift
/// let seen: Version = 41
/// seen.next   // 42
/// let edit = Mutation.set(try DocumentPath("notes/a"), ["title": "Hi"])
///     .requiring(.version(seen))   // fails with failed-precondition unless notes/a is at 41
/// ```
public struct Version: Sendable, Hashable, Comparable, Codable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    /// The position in the sequence; 0 means "before any write".
    public var rawValue: UInt64

    /// A version from its position in the commit sequence.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public init(integerLiteral value: UInt64) { self.rawValue = value }

    /// The version before any write.
    public static let zero = Version(0)

    /// The version after this one.
    public var next: Version { Version(rawValue + 1) }

    public var description: String { String(rawValue) }

    public static func < (lhs: Version, rhs: Version) -> Bool { lhs.rawValue < rhs.rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(UInt64.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
