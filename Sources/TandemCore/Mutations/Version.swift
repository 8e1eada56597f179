/// A point in a database's commit sequence. The server stamps every committed write with the next
/// version; a change token is a version.
public struct Version: Sendable, Hashable, Comparable, Codable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    /// The position in the sequence; 0 means "before any write".
    public var rawValue: UInt64

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
