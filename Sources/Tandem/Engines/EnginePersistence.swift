import TandemCore

/// How an engine's core stores its state: not at all (in memory), as collection changes, or as a
/// whole document state.
enum EnginePersistence: Sendable {
    case memory
    case collection(any LocalCollectionPersistence)
    case document(any LocalDocumentPersistence)

    /// What one change writes, taken as a value while the state is locked and written after the
    /// lock is released. For a document engine the whole state is rewritten from the view.
    func write(_ change: LocalCollectionChange, view: LocalView, documentID: String?, resumeVersion: Version?) -> LocalWrite {
        switch self {
        case .memory:
            return .none
        case .collection(let persistence):
            return .collection(persistence, change)
        case .document(let persistence):
            let base = view.base.values.first { $0.path.id == documentID }
            return .document(persistence, LocalDocumentState(documentID: documentID, base: base, outbox: view.outbox, resumeVersion: resumeVersion))
        }
    }
}

/// One write to an engine's persistence, ready to run outside the state's lock.
enum LocalWrite: Sendable {
    case none
    case collection(any LocalCollectionPersistence, LocalCollectionChange)
    case document(any LocalDocumentPersistence, LocalDocumentState)

    func run() throws {
        switch self {
        case .none:
            return
        case .collection(let persistence, let change):
            try persistence.apply(change)
        case .document(let persistence, let state):
            try persistence.save(state)
        }
    }
}
