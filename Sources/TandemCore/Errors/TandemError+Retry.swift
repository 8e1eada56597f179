extension TandemError.Code {
    /// Whether an error with this code will fail the same way however often it is retried:
    /// the write is wrong (invalid, too large), forbidden, or its precondition does not hold.
    /// Everything else (unavailable, deadline exceeded, aborted…) is worth retrying.
    public var isPermanent: Bool {
        switch self {
        case .invalidArgument, .permissionDenied, .failedPrecondition, .notFound, .alreadyExists,
            .resourceExhausted, .unimplemented, .dataLoss:
            return true
        default:
            return false
        }
    }
}

extension TandemError {
    /// Whether retrying cannot help; see ``Code/isPermanent``. An error that says when to retry
    /// (``retryAfter``, a rate limit) is never permanent.
    public var isPermanent: Bool { retryAfter == nil && code.isPermanent }

    /// Whether an error, of any type, is a permanent ``TandemError``. Other errors (network, I/O) are
    /// taken as transient.
    public static func isPermanent(_ error: any Error) -> Bool {
        (error as? TandemError)?.isPermanent ?? false
    }
}
