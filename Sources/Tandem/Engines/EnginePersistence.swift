import TandemCore

/// How an engine's core stores its state: not at all (in memory), as collection changes, or as a
/// whole document state.
enum EnginePersistence: Sendable {
    case memory
    case collection(any LocalCollectionPersistence)
    case document(any LocalDocumentPersistence)

    var isDurable: Bool {
        if case .memory = self { return false }
        return true
    }

    /// Stores one change. For a document engine the whole state is rewritten from the view.
    func persist(_ change: LocalCollectionChange, view: LocalView, documentID: String?, resumeVersion: Version?) throws {
        switch self {
        case .memory:
            return
        case .collection(let persistence):
            try persistence.apply(change)
        case .document(let persistence):
            let base = view.base.values.first { $0.path.id == documentID }
            try persistence.save(LocalDocumentState(documentID: documentID, base: base, outbox: view.outbox, resumeVersion: resumeVersion))
        }
    }
}
