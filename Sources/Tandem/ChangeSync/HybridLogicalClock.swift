import TandemCore

/// A hybrid-logical-clock timestamp: wall time in milliseconds, a counter for events within one
/// millisecond (or while the wall clock lags behind a stamp already seen), and the node that made
/// it. Ordered by wall time, then counter, then node id, so any two devices order any two stamps the
/// same way, whatever their clocks say.
public struct HLCTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var wallMilliseconds: Int64
    public var counter: UInt32
    public var node: String

    public init(wallMilliseconds: Int64, counter: UInt32, node: String) {
        self.wallMilliseconds = wallMilliseconds
        self.counter = counter
        self.node = node
    }

    public static func < (a: HLCTimestamp, b: HLCTimestamp) -> Bool {
        (a.wallMilliseconds, a.counter, a.node) < (b.wallMilliseconds, b.counter, b.node)
    }

    /// `wall-counter-node`, as stored beside a record's fields.
    public var description: String { "\(wallMilliseconds)-\(counter)-\(node)" }

    /// A stamp from its description; nil when it is not one.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let wall = Int64(parts[0]), let counter = UInt32(parts[1]), !parts[2].isEmpty else { return nil }
        self.init(wallMilliseconds: wall, counter: counter, node: String(parts[2]))
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let stamp = HLCTimestamp(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(text)' is not a wall-counter-node timestamp."))
        }
        self = stamp
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A hybrid logical clock (one per device): stamps that follow the wall clock while it moves on,
/// and never go back, nor behind any stamp the device has seen from another. Pure: the wall time is
/// passed in.
public struct HybridLogicalClock: Sendable, Hashable, Codable {
    public let node: String
    /// The last stamp made or seen.
    public private(set) var last: HLCTimestamp?

    public init(node: String, last: HLCTimestamp? = nil) {
        self.node = node
        self.last = last
    }

    /// A stamp for a change made now (`wall`: this device's wall clock, in milliseconds).
    public mutating func stamp(wall: Int64) -> HLCTimestamp {
        let next: HLCTimestamp
        if let last, last.wallMilliseconds >= wall {
            next = HLCTimestamp(wallMilliseconds: last.wallMilliseconds, counter: last.counter &+ 1, node: node)
        } else {
            next = HLCTimestamp(wallMilliseconds: wall, counter: 0, node: node)
        }
        last = next
        return next
    }

    /// Takes in a stamp seen from another device: later stamps of this one come after it.
    public mutating func observe(_ stamp: HLCTimestamp, wall: Int64) {
        let known = [last, stamp].compactMap { $0 }.max()!
        if known.wallMilliseconds >= wall {
            last = HLCTimestamp(wallMilliseconds: known.wallMilliseconds, counter: known.counter, node: node)
        } else {
            last = HLCTimestamp(wallMilliseconds: wall, counter: 0, node: node)
        }
    }
}
