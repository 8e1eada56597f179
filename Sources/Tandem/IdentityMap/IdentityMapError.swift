/// An identity-map write that was refused.
///
/// ```swift
/// do {
///     try map.store(user, stamp: 3)
/// } catch IdentityMapError.Code.staleStamp {
///     // a newer version of this user is already stored
/// }
/// ```
public struct IdentityMapError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable code to match on.
    public struct Code: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The stamp given is not newer than the stored one: the write was older data.
        public static let staleStamp = Code(rawValue: "stale-stamp")

        /// Whether `error` is an `IdentityMapError` with this code, so that
        /// `catch IdentityMapError.Code.staleStamp` matches it.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? IdentityMapError)?.code == code
        }
    }

    /// What went wrong, as a stable code to match on, such as `staleStamp`.
    public var code: Code
    /// What went wrong and what to do about it, for people to read.
    public var message: String
    /// The stamp the map holds for the entity.
    public var currentStamp: Stamp?
    /// The stamp that was refused.
    public var rejectedStamp: Stamp?

    static func staleStamp(entity: String, current: Stamp, rejected: Stamp) -> IdentityMapError {
        IdentityMapError(
            code: .staleStamp,
            message: "\(entity) is stored with stamp \(current); stamp \(rejected) is not newer, so the value was not stored. Pass a higher stamp, or nil to store without one.",
            currentStamp: current,
            rejectedStamp: rejected
        )
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

/// A modification stamp: a higher stamp is newer data. Any `Double` works, such as a time interval or
/// a server version.
public typealias Stamp = Double
