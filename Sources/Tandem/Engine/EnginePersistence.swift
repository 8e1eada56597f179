import TandemCore

/// How an engine's core stores its state: not at all (in memory), as collection changes, or as a
/// whole document state.
enum EnginePersistence: Sendable {
    case memory
    case collection(any LocalCollectionPersistence)
    case document(any LocalDocumentPersistence)
    /// A space whose saved state could not be read (``openLastSpace(managerKey:newWriterID:)``): nothing is
    /// written to it, so the writes queued there stay as they are (another writer id's entries
    /// would overwrite them, and be sent under the stored id with numbers it already used, which
    /// the server takes for replays). A write that must be queued on disk is refused with `error`.
    case unreadable(TandemError)

    /// Why a write cannot be queued in a space that could not be read.
    static func unreadable(because error: any Error) -> EnginePersistence {
        .unreadable(TandemError(.failedPrecondition, "This engine's saved state could not be read (\((error as? TandemError)?.message ?? "\(error)")), so nothing can be queued on disk: the write was not made, and the writes queued there are kept as they are. Make the engine again to read it once more; if it stays unreadable, clear the persistence (its clear(), which drops the writes queued in it).", cause: error))
    }

    /// What one change writes, taken as a value while the state is locked and written after the
    /// lock is released. For a document engine the whole state is rewritten from the view.
    func write(_ change: LocalCollectionChange, view: LocalView, documentID: String?, resumeVersion: Version?) -> LocalWrite {
        switch self {
        case .memory:
            return .none
        case .unreadable(let error):
            // Server state is simply not kept; a write the app is told is queued must be.
            return change.outboxPuts.isEmpty && change.nextSequence == nil ? .none : .refused(error)
        case .collection(let persistence):
            return .collection(persistence, change)
        case .document(let persistence):
            let base = documentID.flatMap { id in view.base.values.first { PathRules.sameBytes($0.path.id, id) } }
            return .document(persistence, LocalDocumentState(documentID: documentID, base: base, outbox: view.outbox, resumeVersion: resumeVersion))
        }
    }
}

extension EnginePersistence {
    /// What names the storage itself when Tandem made it (a file, and the key's rows in it): two
    /// engines with the same name share one storage, and only one may live at a time. Nil for
    /// memory and for persistences of the app's own, which Tandem cannot tell apart.
    var storageName: String? {
        switch self {
        case .collection(let persistence as SQLiteCollectionPersistence): "\(persistence.pool.path)#\(persistence.managerKey)"
        case .document(let persistence as FileDocumentPersistence): persistence.fileURL.standardizedFileURL.path
        default: nil
        }
    }
}

/// One write to an engine's persistence, ready to run outside the state's lock.
enum LocalWrite: Sendable {
    case none
    case collection(any LocalCollectionPersistence, LocalCollectionChange)
    case document(any LocalDocumentPersistence, LocalDocumentState)
    /// A write the space cannot take (``EnginePersistence/unreadable(_:)``): running it throws.
    case refused(TandemError)

    func run() throws {
        switch self {
        case .none:
            return
        case .refused(let error):
            throw error
        case .collection(let persistence, let change):
            try persistence.apply(change)
        case .document(let persistence, let state):
            try persistence.save(state)
        }
    }
}

/// What one space of an engine keeps (see ``EnginePersistence/space(for:)``): its cached
/// documents, outbox (with the space's writer id), resume point and, for a document engine, the
/// document it follows.
struct SpaceState: Sendable {
    var documents: [Document] = []
    var outbox: Outbox
    var resumeVersion: Version?
    /// The digest of the query the resume version belongs to (collection engines).
    var resumeQuery: String?
    var documentID: String?
}

/// A space an engine opened: whose it is (nil: the signed-out space), where it is kept, and what
/// it holds.
struct OpenedSpace: Sendable {
    var user: String?
    var persistence: EnginePersistence
    var state: SpaceState
}

extension EnginePersistence {
    /// The persistence of `user`'s space; nil is the signed-out space, this persistence itself.
    /// Asked of the persistence the engine was made with. Memory only, every space is in memory.
    func space(for user: String?) throws -> EnginePersistence {
        guard let user else { return self }
        switch self {
        case .memory: return .memory
        case .unreadable: return self
        case .collection(let persistence): return .collection(try persistence.space(for: user))
        case .document(let persistence): return .document(try persistence.space(for: user))
        }
    }

    /// The user whose space the engine showed last (nil: signed out, or none yet).
    func lastUser() throws -> String? {
        switch self {
        case .memory, .unreadable: return nil
        case .collection(let persistence): return try persistence.lastUser()
        case .document(let persistence): return try persistence.lastUser()
        }
    }

    func setLastUser(_ user: String?) throws {
        switch self {
        case .memory, .unreadable: return
        case .collection(let persistence): try persistence.setLastUser(user)
        case .document(let persistence): try persistence.setLastUser(user)
        }
    }

    /// The space's saved state; a new one, with a writer id of its own, when nothing was saved.
    func loadSpace(newWriterID: () -> String) throws -> SpaceState {
        switch self {
        case .memory:
            return SpaceState(outbox: Outbox(clientID: newWriterID()))
        case .unreadable(let error):
            throw error
        case .collection(let persistence):
            let saved = try persistence.load() ?? persistence.create(clientID: newWriterID())
            return SpaceState(documents: saved.documents, outbox: saved.outbox, resumeVersion: saved.resumeVersion, resumeQuery: saved.resumeQuery)
        case .document(let persistence):
            guard let saved = try persistence.load() else { return SpaceState(outbox: Outbox(clientID: newWriterID())) }
            return SpaceState(documents: saved.base.map { [$0] } ?? [], outbox: saved.outbox, resumeVersion: saved.resumeVersion, documentID: saved.documentID)
        }
    }

    /// Opens the space the engine showed last, as an engine does when it is made: once a released
    /// engine of `managerKey` has run its last steps (``EngineHandover``). A space that cannot be
    /// read opens empty, in memory, with the error to log, and takes no write that must be queued
    /// on disk (``unreadable(_:)``).
    func openLastSpace(managerKey: String, newWriterID: () -> String) -> (OpenedSpace, (any Error)?) {
        if let storage = storageName { EngineHandover.supersede(in: storage) }
        if case .memory = self {} else { EngineHandover.waitForLeaving(managerKey) }
        var user: String?
        do {
            user = try lastUser()
            let persistence = try space(for: user)
            return (OpenedSpace(user: user, persistence: persistence, state: try persistence.loadSpace(newWriterID: newWriterID)), nil)
        } catch {
            return (OpenedSpace(user: user, persistence: .unreadable(because: error), state: SpaceState(outbox: Outbox(clientID: newWriterID()))), error)
        }
    }
}
