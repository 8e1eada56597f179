import Synchronization
import TandemCore

/// What an engine's readers see: its state as the last change left it, published whole after
/// each change. A reader takes a lock only to fetch the current snapshot, never the lock changes
/// run under, so it waits on neither disk, decoding nor a merge.
///
/// Nothing in a snapshot changes. It shares its lists with the engine's working state (chunked,
/// so the next change copies a chunk, not the whole list); what needs a pass over every document
/// (the shown models in one array, the set of paths with pending writes) is made once, by the
/// first reader that asks for it.
@usableFromInline
final class EngineSnapshot<T: SyncModel>: Sendable {
    /// Increases with each published state: an older one never replaces a newer one.
    let generation: UInt64
    /// Every decoded model, in path order, and their paths.
    let paths: ChunkedList<DocumentPath>
    let models: ChunkedList<T>
    /// Each model's revision: a new one each time it is decoded from a changed document.
    let revisions: ChunkedList<UInt64>
    /// The listened query's members (keys, models and revisions, in query order) and the window
    /// of them shown; nil when every model is shown in path order.
    let query: (keys: ChunkedList<QueryView<T>.Key>, models: ChunkedList<T>, revisions: ChunkedList<UInt64>, window: Range<Int>)?
    let pendingWrites: ChunkedList<PendingWrite>
    let isFromCache: Bool
    let documentID: String?
    /// The space (user) epoch the state belongs to: how many times the engine had switched
    /// spaces when it was made. A change made from this snapshot is recorded only in that space.
    let space: Int

    private struct Derived {
        var shown: [T]?
        var shownPaths: Set<DocumentPath>?
        var pendingPaths: Set<DocumentPath>?
    }

    private let derived = Mutex(Derived())

    init(generation: UInt64, paths: ChunkedList<DocumentPath>, models: ChunkedList<T>, revisions: ChunkedList<UInt64>, query: QueryView<T>?,
         pendingWrites: ChunkedList<PendingWrite>, isFromCache: Bool, documentID: String?, space: Int) {
        self.generation = generation
        self.paths = paths
        self.models = models
        self.revisions = revisions
        self.query = query.map { ($0.keys, $0.models, $0.revisions, $0.window) }
        self.pendingWrites = pendingWrites
        self.isFromCache = isFromCache
        self.documentID = documentID
        self.space = space
    }

    /// What the engine shows: the query's window of its members, or every model in path order.
    var shown: [T] {
        once({ $0.shown }, { $0.shown = $1 }) { query.map { $0.models.elements(in: $0.window) } ?? models.array }
    }

    private var shownPaths: Set<DocumentPath> {
        once({ $0.shownPaths }, { $0.shownPaths = $1 }) { query.map { Set($0.keys.elements(in: $0.window).lazy.map(\.path)) } ?? Set(paths) }
    }

    private var pendingPaths: Set<DocumentPath> {
        once({ $0.pendingPaths }, { $0.pendingPaths = $1 }) { Set(pendingWrites.lazy.map(\.path)) }
    }

    /// A value made once per snapshot, outside its lock: two readers racing may both make it, and
    /// one keeps it. (Closures, not key paths: a key path into a generic class is made anew on
    /// each use.)
    private func once<Value: Sendable>(_ get: (Derived) -> Value?, _ set: (inout Derived, Value) -> Void, make: () -> Value) -> Value {
        if let made = derived.withLock({ get($0) }) { return made }
        let value = make()
        return derived.withLock { derived in
            if let made = get(derived) { return made }
            set(&derived, value)
            return value
        }
    }

    /// Whether this snapshot shows the very models `other` shows (a change of pending writes or
    /// metadata only): its shown array, once made, stands for this one too.
    func showsSame(as other: EngineSnapshot) -> Bool {
        switch (query, other.query) {
        case (nil, nil): return models.sharesStorage(with: other.models)
        case (let mine?, let theirs?): return mine.window == theirs.window && mine.models.sharesStorage(with: theirs.models)
        default: return false
        }
    }

    /// The shown documents' paths and models, in order.
    var shownDocuments: [(path: DocumentPath, model: T)] {
        guard let query else { return zip(paths, models).map { ($0, $1) } }
        return zip(query.keys.elements(in: query.window).lazy.map(\.path), shown).map { ($0, $1) }
    }

    /// The model at `path`, shown or not.
    func model(at path: DocumentPath) -> T? {
        index(of: path).map { models[$0] }
    }

    /// The model at `path` and its revision.
    func revisedModel(at path: DocumentPath) -> (model: T, revision: UInt64)? {
        index(of: path).map { (models[$0], revisions[$0]) }
    }

    private func index(of path: DocumentPath) -> Int? {
        let index = paths.partitionIndex { $0 < path }
        return index < paths.count && paths[index] == path ? index : nil
    }

    /// The shown documents for a snapshot sequence: paths, models and revisions, in order, and
    /// the metadata of them all.
    var shownState: ShownState<T> {
        let shown = self.shown
        // Whether a shown document has pending writes: the pending paths are usually few.
        let pending = !pendingWrites.isEmpty && pendingPaths.contains { query == nil ? index(of: $0) != nil : shownPaths.contains($0) }
        let metadata = DocumentMetadata(hasPendingWrites: pending, isFromCache: isFromCache)
        guard let query else {
            return ShownState(paths: paths.array, models: shown, revisions: revisions.array, metadata: metadata)
        }
        let order = query.keys.elements(in: query.window).map(\.path)
        return ShownState(paths: order, models: shown, revisions: query.revisions.elements(in: query.window), metadata: metadata)
    }

    /// The shown document at `position` (in the shown order): its path and model.
    func shownDocument(at position: Int) -> (path: DocumentPath, model: T) {
        guard let query else { return (paths[position], models[position]) }
        return (query.keys[query.window.lowerBound + position].path, query.models[query.window.lowerBound + position])
    }

    /// The positions among the shown documents whose model is newer than in `older`, when both
    /// show the same documents in the same order; nil when they do not (a document came, went or
    /// moved), and the reader takes the shown documents whole. Lists that share a chunk hold the
    /// same elements in it, so a change of a few documents costs a pass over the chunks and over
    /// the elements of those that changed, not over every document.
    func changedShownPositions(since older: EngineSnapshot) -> [Int]? {
        let changed: [Int]
        let window: Range<Int>
        switch (query, older.query) {
        case (nil, nil):
            guard let moved = paths.differingIndices(from: older.paths, where: !=), moved.isEmpty,
                  let revised = revisions.differingIndices(from: older.revisions, where: !=) else { return nil }
            changed = revised
            window = 0..<paths.count
        case (let mine?, let theirs?):
            guard mine.window == theirs.window,
                  let moved = mine.keys.differingIndices(from: theirs.keys, where: { $0.path != $1.path }), moved.isEmpty,
                  let revised = mine.revisions.differingIndices(from: theirs.revisions, where: !=) else { return nil }
            changed = revised
            window = mine.window
        default:
            return nil
        }
        return changed.filter { window.contains($0) }.map { $0 - window.lowerBound }
    }

    /// The shown model at `path`, or nil.
    func shownModel(at path: DocumentPath) -> T? {
        if query != nil, !shownPaths.contains(path) { return nil }
        return model(at: path)
    }

    func metadata(at path: DocumentPath) -> DocumentMetadata {
        let pending = !pendingWrites.isEmpty && pendingPaths.contains(path)
        return DocumentMetadata(hasPendingWrites: pending, isFromCache: isFromCache)
    }
}
