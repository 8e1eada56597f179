import TandemCore

/// What a `DocumentSyncEngine` keeps between launches: the document it follows, the server's last
/// confirmed state of it, and the writes not yet acknowledged.
public struct LocalDocumentState: Sendable, Hashable, Codable {
    /// The id of the document the engine listens to, so it survives a restart.
    public var documentID: String?
    /// The last state the server confirmed; nil when there is none or it was deleted.
    public var base: Document?
    /// Writes not yet acknowledged, oldest first, with the client id and next sequence number.
    public var outbox: Outbox
    /// The last version the listener saw, to resume from after a restart.
    public var resumeVersion: Version?

    /// A state with this document id, confirmed document, outbox and resume point; by default only
    /// the outbox, as for a new engine.
    public init(documentID: String? = nil, base: Document? = nil, outbox: Outbox, resumeVersion: Version? = nil) {
        self.documentID = documentID
        self.base = base
        self.outbox = outbox
        self.resumeVersion = resumeVersion
    }
}

/// Where a `DocumentSyncEngine` keeps its ``LocalDocumentState``. A save replaces the whole state
/// atomically: after a crash at any point, a load reads either the state before or the state after.
public protocol LocalDocumentPersistence: Sendable {
    /// The saved state, or nil when nothing was saved.
    func load() throws -> LocalDocumentState?
    /// Replaces the saved state, durably, before returning.
    func save(_ state: LocalDocumentState) throws
    /// Removes the saved state.
    func clear() throws

    /// The persistence of the same engine for a signed-in user's space (see
    /// ``LocalCollectionPersistence/space(for:)``).
    func space(for user: String) throws -> any LocalDocumentPersistence
    /// The user whose space the engine showed last (nil: the signed-out space, or none yet).
    func lastUser() throws -> String?
    /// Records whose space the engine shows now.
    func setLastUser(_ user: String?) throws
}

/// The manager key of a signed-in user's space of an engine: apart from the engine's own key (the
/// signed-out space) and from every other user's.
package func spaceKey(_ managerKey: String, user: String) -> String {
    "\(managerKey)/user/\(user.utf8.count):\(user)"
}
