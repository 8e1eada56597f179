import TandemCore

/// A hybrid-logical-clock timestamp: wall time in milliseconds, a counter for events within one
/// millisecond (or while the wall clock lags behind a stamp already seen), and the node that made
/// it. Ordered by wall time, then counter, then node id, so any two devices order any two stamps the
/// same way, whatever their clocks say.
public struct HLCTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The wall time, in milliseconds since 1970.
    public var wallMilliseconds: Int64
    /// Orders stamps that share a wall time (0 for the first of them).
    public var counter: UInt32
    /// The node that made the stamp (an engine's is its client's id); the last tie-break.
    public var node: String

    /// A stamp from its three parts.
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
        // Read byte by byte: a fetched record has one per property.
        let utf8 = text.utf8
        var index = utf8.startIndex
        func number(limit: UInt64) -> UInt64? {
            var value: UInt64 = 0
            var digits = 0
            while index < utf8.endIndex, utf8[index] != UInt8(ascii: "-") {
                let byte = utf8[index]
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 19 else { return nil }
                value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
                digits += 1
                index = utf8.index(after: index)
            }
            guard digits > 0, value <= limit, index < utf8.endIndex else { return nil }
            index = utf8.index(after: index)
            return value
        }
        guard let wall = number(limit: UInt64(Int64.max)), let counter = number(limit: UInt64(UInt32.max)), index < utf8.endIndex else { return nil }
        self.init(wallMilliseconds: Int64(wall), counter: UInt32(counter), node: String(text[index...]))
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
    /// The node this clock's stamps name (one per device).
    public let node: String
    /// The last stamp made or seen.
    public private(set) var last: HLCTimestamp?

    /// A clock for `node` that stamps after `last`, the last stamp it made or saw (nil for a new
    /// clock).
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
