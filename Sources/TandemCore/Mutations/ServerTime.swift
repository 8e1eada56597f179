import Foundation

/// The commit time a server passes to `serverTimestamp` transforms.
public struct ServerTime: Sendable, Hashable {
    /// The commit time.
    public var date: Date

    /// A server time at this date.
    public init(_ date: Date) { self.date = date }

    /// ISO 8601 in UTC with milliseconds, e.g. `2026-11-22T04:33:00.123Z`; it sorts as text.
    public var iso8601: String {
        WireTimestamp.format(date)
    }
}
