/// One write request among several sent together (`RemoteCollectionService.commit(requests:)` in
/// `Tandem`):
/// its mutations, applied all together or decided one by one.
public struct WriteRequest: Sendable, Hashable {
    /// The mutations, in the order they are applied or decided.
    public var mutations: [Mutation]
    /// True (an atomic batch): every mutation applies or none does. False: each is decided on its
    /// own, in order, and the answer lists each one's fate, refused ones included.
    public var isAtomic: Bool
    /// Whether the answer may leave out the documents of applied writes (their versions only;
    /// refusals still carry theirs): for a caller that has what it wrote.
    public var isBrief = false
    /// The user the request is made for, when its sender keeps one user's writes apart from
    /// another's (an engine's space, a change-sync account): `.some(nil)` for the signed-out one.
    /// A client never sends it on a connection signed in as anyone else; it fails with
    /// `unavailable` instead, and is sent again once that user is back. Nil: whoever is signed in.
    package var madeFor: String?? = nil

    /// Whether it goes as a plain atomic write: atomic, or one mutation, which is the same thing.
    public var isOneWrite: Bool { isAtomic || mutations.count <= 1 }

    /// A request of these mutations, atomic unless `isAtomic` is false.
    public init(_ mutations: [Mutation], isAtomic: Bool = true) {
        self.mutations = mutations
        self.isAtomic = isAtomic
    }
}
