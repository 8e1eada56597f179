import TandemCore

/// Decides, inside a commit, whether its caller may make one write, from the document before the
/// write and after it (nil: there is none, or the write deletes it). A store hands it to
/// ``CommitPlanner``, which calls it for each new mutation as it applies; a refusal refuses the
/// whole request, like a failed precondition: nothing of it is written, and its mutation ids are
/// recorded as refused with that error.
public struct WriteAuthorizer: Sendable {
    private let decide: @Sendable (DocumentPath, Document?, Document?) -> TandemError?
    private let conceal: @Sendable (DocumentPath, Document?) -> TandemError?

    /// `decide` returns nil to allow the write, or the error that refuses it. `conceal` is asked
    /// when a write fails on the document's state (a precondition, an update of a missing
    /// document, the size limit), before that error is answered, with the document as committed
    /// before the request (even when an earlier write of the request changed it): it returns the
    /// refusal to answer instead when the caller may not learn of the document (nil: answer the
    /// error as it is).
    public init(_ decide: @escaping @Sendable (_ path: DocumentPath, _ before: Document?, _ after: Document?) -> TandemError?,
                conceal: @escaping @Sendable (_ path: DocumentPath, _ document: Document?) -> TandemError? = { _, _ in nil }) {
        self.decide = decide
        self.conceal = conceal
    }

    /// Nil when the caller may learn of the document as it is (`document`, nil when there is
    /// none) from a failed write's error; else the refusal to answer instead.
    public func concealment(_ path: DocumentPath, document: Document?) -> TandemError? {
        conceal(path, document)
    }

    /// Nil when the write is allowed, else why not.
    public func check(_ path: DocumentPath, before: Document?, after: Document?) -> TandemError? {
        decide(path, before, after)
    }
}
