/// The one error type of Tandem's data domain: what went wrong, as a stable code that travels on the
/// wire, and a message that says what happened and what to do.
///
/// Match on the code in a `catch` clause:
///
/// ```swift
/// do {
///     let path = try DocumentPath("users")
/// } catch TandemError.Code.invalidArgument {
///     // a collection path where a document path was expected
/// }
/// ```
public struct TandemError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable, wire-visible error code such as `invalid-argument` or `not-found`.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The request itself is wrong: a malformed path, query, value or message. Fix the input.
        public static let invalidArgument = Code(rawValue: "invalid-argument")
        /// The document or resource does not exist.
        public static let notFound = Code(rawValue: "not-found")
        /// A document that must not exist already does.
        public static let alreadyExists = Code(rawValue: "already-exists")
        /// The caller may not do this.
        public static let permissionDenied = Code(rawValue: "permission-denied")
        /// A precondition (exists, not exists, version) did not hold.
        public static let failedPrecondition = Code(rawValue: "failed-precondition")
        /// The operation was aborted, typically by a concurrent conflict; it may be retried.
        public static let aborted = Code(rawValue: "aborted")
        /// A limit was exceeded: document size, batch size, rate.
        public static let resourceExhausted = Code(rawValue: "resource-exhausted")
        /// A position is outside what is kept, such as a change token older than the retained history:
        /// reload from a full snapshot.
        public static let outOfRange = Code(rawValue: "out-of-range")
        /// The service cannot be reached now; retry later.
        public static let unavailable = Code(rawValue: "unavailable")
        /// The request carries no valid credentials.
        public static let unauthenticated = Code(rawValue: "unauthenticated")
        /// The operation was cancelled.
        public static let cancelled = Code(rawValue: "cancelled")
        /// A deadline passed before the operation completed.
        public static let deadlineExceeded = Code(rawValue: "deadline-exceeded")
        /// The operation is not implemented or not supported.
        public static let unimplemented = Code(rawValue: "unimplemented")
        /// An invariant broke inside Tandem. Please report it.
        public static let `internal` = Code(rawValue: "internal")
        /// Data was lost or corrupted.
        public static let dataLoss = Code(rawValue: "data-loss")
        /// An error with no better code.
        public static let unknown = Code(rawValue: "unknown")

        /// Every code Tandem uses, in one place: the protocol document's table of codes is
        /// checked against it.
        public static let all: [Code] = [
            .invalidArgument, .notFound, .alreadyExists, .permissionDenied, .failedPrecondition, .aborted, .resourceExhausted,
            .outOfRange, .unavailable, .unauthenticated, .cancelled, .deadlineExceeded, .unimplemented, .internal, .dataLoss, .unknown,
        ]

        /// Lets `catch TandemError.Code.notFound` match a thrown ``TandemError``.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? TandemError)?.code == code
        }
    }

    /// The stable code.
    public var code: Code
    /// What happened and what to do, for a person.
    public var message: String
    /// The underlying error, when there is one.
    public var cause: (any Error & Sendable)?
    /// A stable, machine-readable detail within the code, when one helps the caller decide what to
    /// do: `token-expired` on an `unauthenticated` error means a fresh token will do. Sent on the
    /// wire beside the code.
    public var reason: String?
    /// How long to wait before sending the request again, when a limit says so (`resource-exhausted`
    /// past a rate). Such an error passes: the same request, sent after the wait, can succeed.
    /// Sent on the wire as `retryAfter`, in milliseconds.
    public var retryAfter: Duration?

    /// An error with its code and message, and, when they apply, its cause, reason and wait.
    ///
    /// - Parameters:
    ///   - code: The stable code, such as `.notFound`.
    ///   - message: What happened and what to do, for a person.
    ///   - cause: The underlying error, if any.
    ///   - reason: A machine-readable detail within the code, such as `TandemError.tokenExpired`.
    ///   - retryAfter: How long to wait before sending the request again, when a limit says so.
    public init(_ code: Code, _ message: String, cause: (any Error & Sendable)? = nil, reason: String? = nil, retryAfter: Duration? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
        self.reason = reason
        self.retryAfter = retryAfter
    }

    public var description: String {
        if let cause { return "\(code.rawValue): \(message) (cause: \(cause))" }
        return "\(code.rawValue): \(message)"
    }

    /// Errors are equal when their code and message are; the cause is context, not identity.
    public static func == (lhs: TandemError, rhs: TandemError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
    }
}

extension TandemError {
    /// The ``reason`` of an `unauthenticated` error whose bearer token expired.
    public static let tokenExpired = "token-expired"

    /// Every ``reason`` Tandem sends.
    public static let allReasons = [tokenExpired]

    /// Shorthand for an `invalid-argument` error.
    package static func invalidArgument(_ message: String) -> TandemError {
        TandemError(.invalidArgument, message)
    }
}
