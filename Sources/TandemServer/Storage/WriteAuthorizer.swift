import TandemCore

/// Decides, inside a commit, whether its caller may make one write, from the document before the
/// write and after it (nil: there is none, or the write deletes it). A store hands it to
/// ``CommitPlanner``, which calls it for each new mutation as it applies; a refusal refuses the
/// whole request, like a failed precondition: nothing of it is written, and its mutation ids are
/// recorded as refused with that error.
public struct WriteAuthorizer: Sendable {
    private let decide: @Sendable (DocumentPath, Document?, Document?) -> TandemError?

    /// `decide` returns nil to allow the write, or the error that refuses it.
    public init(_ decide: @escaping @Sendable (_ path: DocumentPath, _ before: Document?, _ after: Document?) -> TandemError?) {
        self.decide = decide
    }

    /// Nil when the write is allowed, else why not.
    public func check(_ path: DocumentPath, before: Document?, after: Document?) -> TandemError? {
        decide(path, before, after)
    }
}
