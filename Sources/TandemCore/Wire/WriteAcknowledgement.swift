/// What happened to one mutation of a write, as the server answers it.
///
/// A mutation carrying a ``MutationID`` is decided once: applied or refused. Every later
/// request carrying the same id (a retry after a lost answer) is answered with that decision
/// again, never applied a second time.
public enum WriteStatus: String, Sendable, Hashable, Codable, CaseIterable {
    /// Applied now, by this request.
    case applied
    /// Applied earlier, by a request carrying the same id: the answer is the one first given.
    case replayed
    /// Refused for good, now or earlier: ``WriteAcknowledgement/error`` says why. Nothing of the
    /// request it belongs to was written.
    case refused
    /// Decided so long ago that its answer is no longer kept: the write was applied or refused,
    /// and the server no longer knows which. Read the document to learn its state.
    case unknown
}

/// The server's answer to one mutation: what happened to it, the version, and the document after it.
public struct WriteAcknowledgement: Sendable, Hashable {
    /// The mutation's id; nil for a write made without one (over HTTP, say).
    public var id: MutationID?
    /// What happened to the mutation.
    public var status: WriteStatus
    /// The version of the commit that applied it (`applied`, `replayed`); for `refused` and
    /// `unknown`, the version the server had reached when it answered.
    public var version: Version
    /// The document as committed; nil when the write deleted it, when it is concealed
    /// (``isConcealed``), and for `unknown`. For `refused` with `failed-precondition`, the
    /// document the precondition was about as committed before the request, when its caller may
    /// read it (nil when there was none, when the refusal is given again, and for any other
    /// refusal): never what earlier mutations of the same request would have made of it.
    public var document: Document?
    /// The write applied, but its caller may not read the document it left (say, a write that gave
    /// the document to another user): `document` is nil without meaning a deletion. A client drops
    /// its cached copy, since it can no longer see it.
    public var isConcealed = false
    /// Why the mutation was refused (`refused` only).
    public var error: TandemError?
    /// The document's data as compact JSON text, when whoever made this acknowledgement had it (the
    /// store that wrote it, a reader that kept it): it is written or stored as it is. Not part of
    /// equality: it spells `document.data`.
    package var encodedData: String?

    /// An acknowledgement of an applied write.
    public init(id: MutationID?, version: Version, document: Document?) {
        self.init(id: id, status: .applied, version: version, document: document)
    }

    /// An acknowledgement with any status, the document it leaves (nil by default) and, for a
    /// refusal, the error.
    public init(id: MutationID?, status: WriteStatus, version: Version, document: Document? = nil, error: TandemError? = nil) {
        self.id = id
        self.status = status
        self.version = version
        self.document = document
        self.error = error
    }

    package init(id: MutationID?, status: WriteStatus = .applied, version: Version, document: Document?, encodedData: String?) {
        self.init(id: id, status: status, version: version, document: document)
        self.encodedData = document == nil ? nil : encodedData
    }

    /// A refusal of the mutation `id` for `error`, decided at `version`.
    public static func refused(_ id: MutationID?, _ error: TandemError, at version: Version) -> WriteAcknowledgement {
        WriteAcknowledgement(id: id, status: .refused, version: version, error: error)
    }

    /// Whether the mutation is in the server's state: applied now or before.
    public var isApplied: Bool { status == .applied || status == .replayed }

    /// The same answer without its document, for a caller who may not read it.
    public var concealed: WriteAcknowledgement {
        var copy = WriteAcknowledgement(id: id, status: status, version: version, error: error)
        copy.isConcealed = document != nil
        return copy
    }

    /// The same answer given again for a replay: `replayed` where it was `applied`.
    public var replayed: WriteAcknowledgement {
        var copy = self
        if copy.status == .applied { copy.status = .replayed }
        return copy
    }

    public static func == (lhs: WriteAcknowledgement, rhs: WriteAcknowledgement) -> Bool {
        lhs.id == rhs.id && lhs.status == rhs.status && lhs.version == rhs.version && lhs.document == rhs.document
            && lhs.isConcealed == rhs.isConcealed && lhs.error?.code == rhs.error?.code && lhs.error?.message == rhs.error?.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(status)
        hasher.combine(version)
        hasher.combine(document)
    }
}
