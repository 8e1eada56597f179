import TandemCore

/// What an engine shows at one moment, with what changed since the snapshot before it: the
/// elements of ``CollectionSyncEngine/snapshots()`` and ``CollectionGroupSyncEngine/snapshots()``.
///
/// ```swift
/// for try await snapshot in engine.snapshots() {
///     for change in snapshot.documentChanges where change.kind == .removed {
///         print("gone:", change.document.id)
///     }
///     badge = snapshot.metadata.hasPendingWrites ? "saving…" : ""
/// }
/// ```
public struct CollectionSnapshot<T: SyncModel>: Sendable {
    /// The documents shown, in the listened query's order: ``CollectionSyncEngine/currentCollection``.
    public let documents: [T]
    /// What changed since the previous snapshot of this iteration: removals first (with their
    /// index in the previous snapshot), then additions and modifications in the new order (with
    /// their index in this one). A document is modified when its data changed, pending writes
    /// included. The first snapshot adds every document.
    public let documentChanges: [DocumentChange<T>]
    /// Whether any shown document has writes not yet acknowledged, and whether the documents come
    /// from the cache rather than the server in this session.
    public let metadata: DocumentMetadata

    /// The number of documents shown.
    public var count: Int { documents.count }
    /// Whether no document is shown.
    public var isEmpty: Bool { documents.isEmpty }
}

/// One document's change between two snapshots.
public struct DocumentChange<T: SyncModel>: Sendable {
    /// How a document changed between two snapshots.
    public enum Kind: Sendable, Hashable {
        /// `added`: new in this snapshot; `modified`: its data changed (pending writes included);
        /// `removed`: no longer shown.
        case added, modified, removed
    }

    /// Whether the document was added, modified or removed.
    public let kind: Kind
    /// The document as it is now; for a removal, as it was.
    public let document: T
    /// Its index in the previous snapshot; nil when added.
    public let oldIndex: Int?
    /// Its index in this snapshot; nil when removed.
    public let newIndex: Int?
}

/// The shown documents of an engine, read from one published snapshot.
struct ShownState<T: SyncModel> {
    var paths: [DocumentPath]
    var models: [T]
    /// Each model's revision, to tell a modified document from the same one.
    var revisions: [UInt64]
    var metadata: DocumentMetadata
}

/// Turns successive shown states into snapshots with their changes; nil when nothing changed.
struct SnapshotDiffer<T: SyncModel> {
    private var previous: ShownState<T>?

    mutating func next(_ shown: ShownState<T>) -> CollectionSnapshot<T>? {
        defer { previous = shown }
        guard let previous else {
            let changes = shown.models.enumerated().map { DocumentChange(kind: .added, document: $1, oldIndex: nil, newIndex: $0) }
            return CollectionSnapshot(documents: shown.models, documentChanges: changes, metadata: shown.metadata)
        }
        var oldIndex: [DocumentPath: Int] = [:]
        oldIndex.reserveCapacity(previous.paths.count)
        for (index, path) in previous.paths.enumerated() { oldIndex[path] = index }
        var newIndex: [DocumentPath: Int] = [:]
        newIndex.reserveCapacity(shown.paths.count)
        for (index, path) in shown.paths.enumerated() { newIndex[path] = index }
        var changes: [DocumentChange<T>] = []
        for (index, path) in previous.paths.enumerated() where newIndex[path] == nil {
            changes.append(DocumentChange(kind: .removed, document: previous.models[index], oldIndex: index, newIndex: nil))
        }
        for (index, path) in shown.paths.enumerated() {
            guard let old = oldIndex[path] else {
                changes.append(DocumentChange(kind: .added, document: shown.models[index], oldIndex: nil, newIndex: index))
                continue
            }
            // A document that only moved because others came or went is not reported.
            if previous.revisions[old] != shown.revisions[index] {
                changes.append(DocumentChange(kind: .modified, document: shown.models[index], oldIndex: old, newIndex: index))
            }
        }
        guard !changes.isEmpty || shown.metadata != previous.metadata else { return nil }
        return CollectionSnapshot(documents: shown.models, documentChanges: changes, metadata: shown.metadata)
    }
}

/// A document engine's document at one moment: the elements of ``DocumentSyncEngine/snapshots()``.
public struct DocumentSnapshot<T: SyncModel>: Sendable {
    /// The id listened to; nil before any.
    public let id: String?
    /// ``DocumentSyncEngine/currentDocument``: the document as cached, pending writes included.
    public let document: T?
    /// Whether it has writes not yet acknowledged, and whether it comes from the cache.
    public let metadata: DocumentMetadata

    /// Whether there is a document: false before any id is listened to, and while the document
    /// does not exist or is not known yet.
    public var exists: Bool { document != nil }
}
