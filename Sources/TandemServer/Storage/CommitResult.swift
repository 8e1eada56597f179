import TandemCore

/// The answer to one decided write request: one acknowledgement per mutation, in order, and the
/// batch it committed (nil when nothing new was applied: every mutation was a replay, or refused).
public struct CommitResult: Sendable, Hashable {
    /// One answer per mutation of the request, in order.
    public var acknowledgements: [WriteAcknowledgement]
    /// What the request committed; nil when nothing new was applied.
    public var batch: CommittedBatch?

    /// An answer of `acknowledgements`, with the `batch` committed, if any.
    public init(acknowledgements: [WriteAcknowledgement], batch: CommittedBatch?) {
        self.acknowledgements = acknowledgements
        self.batch = batch
    }

    /// The error of the first refused mutation, if any was refused.
    public var refusal: TandemError? {
        acknowledgements.first { $0.status == .refused }?.error
    }
}
