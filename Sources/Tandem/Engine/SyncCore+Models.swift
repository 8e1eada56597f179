import Foundation
import TandemCore

// The engine's decoded models: built from the view, kept in path order beside it, and brought in
// line with it after each change, in the owner's steps.
extension SyncCore {
    // MARK: Models

    /// Decodes a document into a model; the document id fills a missing `id` field.
    static func decodeModel(_ document: Document) throws -> T {
        try JSONValueDecoder().decode(T.self, from: document.data, defaultID: document.path.id)
    }

    /// Decodes a document into a model, or logs `decode_fail` with its id and returns nil.
    func decode(_ document: Document) -> T? {
        do {
            return try Self.decodeModel(document)
        } catch {
            logDecodeFailure(document.path, error)
            return nil
        }
    }

    /// Decodes every view document, returning those that failed. `orderHint` holds the cached
    /// documents as the persistence read them, probably in path order: with no pending write on
    /// top they are the view itself, taken as they are (no lookup per document), and checking
    /// their order costs one pass where sorting would cost n log n. A large cache is decoded on
    /// two cores. For a state no reader sees yet (an engine being made).
    static func rebuildModels(_ state: inout State, orderHint: [Document] = []) -> [(DocumentPath, any Error)] {
        var documents: [Document]
        if state.view.outbox.isEmpty && orderHint.count == state.view.documents.count {
            documents = orderHint
        } else {
            documents = Array(state.view.documents.values)
        }
        if !zip(documents, documents.dropFirst()).allSatisfy({ $0.path < $1.path }) {
            documents.sort { $0.path < $1.path }
        }
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var failures: [(DocumentPath, any Error)] = []
        if documents.count >= 4_096 {
            let half = documents.count / 2
            var tail: (paths: [DocumentPath], models: [T], failures: [(DocumentPath, any Error)]) = ([], [], [])
            Parallel.both({
                (orderedPaths, ordered, failures) = decodeModels(documents[..<half])
            }, {
                tail = decodeModels(documents[half...])
            })
            orderedPaths.append(contentsOf: tail.paths)
            ordered.append(contentsOf: tail.models)
            failures.append(contentsOf: tail.failures)
        } else {
            (orderedPaths, ordered, failures) = decodeModels(documents[...])
        }
        // Adopted whole: a cold start's models are shown as they are, without a copy.
        state.orderedPaths = ChunkedList(adopting: orderedPaths)
        state.ordered = ChunkedList(adopting: ordered)
        state.revisions = newRevisions(ordered.count, in: &state)
        return failures
    }

    /// The models of `documents` in their order, with their paths, and those that did not decode.
    private static func decodeModels(_ documents: ArraySlice<Document>) -> ([DocumentPath], [T], [(DocumentPath, any Error)]) {
        var paths: [DocumentPath] = []
        var models: [T] = []
        var failures: [(DocumentPath, any Error)] = []
        paths.reserveCapacity(documents.count)
        models.reserveCapacity(documents.count)
        for document in documents {
            do {
                models.append(try decodeModel(document))
                paths.append(document.path)
            } catch {
                failures.append((document.path, error))
            }
        }
        return (paths, models, failures)
    }

    /// Brings the models of `paths` in line with the view, in a locked step: a path whose document
    /// went loses its model, one whose decoded model is at hand (`prepared`) gets it. Returns the
    /// documents left to decode (after the lock, with ``installModels(_:)``); their models stay as
    /// they were until then.
    static func refreshModels(_ paths: [DocumentPath], in state: inout State, prepared: PreparedModels? = nil) -> [Document] {
        let decided = decideModels(paths, from: state.view, prepared: prepared)
        place(decided, into: &state)
        return decided.undecided
    }

    /// Decodes documents found by ``refreshModels(_:in:prepared:)`` outside the state's lock, then
    /// puts their models in place. Called on `queue`, so the view still shows them.
    func installModels(_ documents: [Document]) {
        guard !documents.isEmpty else { return }
        var fresh = DecodedModels()
        for document in documents.sorted(by: { $0.path < $1.path }) {
            fresh.changed.append(document.path)
            if let model = decode(document) {
                fresh.paths.append(document.path)
                fresh.models.append(model)
            }
        }
        let placed = state.access { state -> Bool in
            // Nothing changes the view outside `queue`; checked all the same, as it is cheap.
            guard documents.allSatisfy({ state.view.documents[$0.path] == $0 }) else { return false }
            Self.place(fresh, into: &state)
            return true
        }
        if !placed {
            log("models_stale", ["count": documents.count], severity: .severe)
        }
    }

    /// Models decoded from a batch's documents before its locked step (while later pieces were
    /// still arriving, or just before), in the batch's order. Each stands for the view's document
    /// as long as the view shows that very version of it with no pending write on top (a server
    /// version of a document never changes).
    struct PreparedModels {
        /// Every change's path and document version.
        var paths: [DocumentPath] = []
        var versions: [Version?] = []
        /// Each change's index in `models`, or -1 when its document did not decode (or was none).
        var modelIndex: [Int] = []
        var modelPaths: [DocumentPath] = []
        var models: [T] = []
        /// Documents that did not decode, to log once the batch is applied.
        var failures: [(DocumentPath, any Error)] = []
        /// Whether `modelPaths` is strictly increasing (checked as they come, while at hand).
        private(set) var inPathOrder = true

        init() {}

        /// When set, a model stands for the view's document only when that is this very document,
        /// pending writes or not: for models of what a local write will show.
        private(set) var exactDocuments: [Document]?

        init(_ changes: [RemoteChange]) {
            add(changes)
        }

        /// The models of documents the view is about to show, pending writes included.
        init(showing documents: [Document]) {
            add(documents.map { RemoteChange(path: $0.path, document: $0, version: $0.version) })
            exactDocuments = documents
        }

        /// Whether the prepared change at `index` stands for `document`, shown by `view`.
        func stands(_ index: Int, for document: Document, in view: LocalView, anyPending: Bool) -> Bool {
            if let exactDocuments { return exactDocuments[index] == document }
            return versions[index] == document.version && (!anyPending || !view.hasPendingWrites(document.path))
        }

        mutating func add(_ changes: [RemoteChange]) {
            for change in changes {
                paths.append(change.path)
                versions.append(change.document?.version)
                guard let document = change.document else {
                    modelIndex.append(-1)
                    continue
                }
                do {
                    let model = try decodeModel(document)
                    if inPathOrder, let last = modelPaths.last, !(last < change.path) { inPathOrder = false }
                    modelIndex.append(models.count)
                    modelPaths.append(change.path)
                    models.append(model)
                } catch {
                    modelIndex.append(-1)
                    failures.append((change.path, error))
                }
            }
        }
    }

    /// Models for a merge: the paths whose model is decided (gone, or fresh), the fresh ones in path
    /// order, and the documents still to decode.
    struct DecodedModels {
        var changed: [DocumentPath] = []
        var paths: [DocumentPath] = []
        var models: [T] = []
        var undecided: [Document] = []
    }

    /// Decides the models of the view's documents at `paths` from what is prepared, without decoding.
    static func decideModels(_ paths: [DocumentPath], from view: LocalView, prepared: PreparedModels?) -> DecodedModels {
        // Sort the paths, not (path, model) pairs (moving generic models is slow), and only when
        // they do not come sorted already (strictly increasing also means no repeats).
        var sorted = paths
        if !zip(paths, paths.dropFirst()).allSatisfy({ $0 < $1 }) {
            sorted = Set(paths).sorted()
        }
        // Prepared models line up with the batch when the paths are the batch's own (a snapshot,
        // or a batch of distinct documents in path order); otherwise they are looked up.
        let aligned = prepared.map { $0.paths.count == sorted.count && $0.paths == sorted } ?? false
        var lookup: [DocumentPath: Int] = [:]
        if let prepared, !aligned {
            lookup.reserveCapacity(prepared.paths.count)
            for (index, path) in prepared.paths.enumerated() { lookup[path] = index }
        }
        let documents = view.documents
        let anyPending = view.hasPendingWrites
        var decided = DecodedModels()
        // Two arrays rather than one of (path, model) pairs: generic tuples copy slowly.
        decided.changed.reserveCapacity(sorted.count)
        decided.paths.reserveCapacity(sorted.count)
        decided.models.reserveCapacity(sorted.count)
        for (position, path) in sorted.enumerated() {
            guard let document = documents[path] else {
                decided.changed.append(path)
                continue
            }
            if let prepared, let index = aligned ? position : lookup[path],
               prepared.stands(index, for: document, in: view, anyPending: anyPending) {
                decided.changed.append(path)
                let model = prepared.modelIndex[index]
                if model >= 0 {
                    decided.paths.append(path)
                    decided.models.append(prepared.models[model])
                }
            } else {
                decided.undecided.append(document)
            }
        }
        return decided
    }

    /// Puts decided models in place of those of their paths, keeping path order, and moves them in
    /// the query's view.
    static func place(_ fresh: DecodedModels, into state: inout State) {
        placeModels(fresh, into: &state)
        refreshQueryView(fresh.changed, in: &state)
    }

    /// Brings the query's view in line with the models of `changed` (nil: of every path).
    static func refreshQueryView(_ changed: [DocumentPath]?, in state: inout State) {
        guard state.queryView != nil else { return }
        // Local copies share storage with the state's arrays, which do not change meanwhile; the
        // view is changed in place, so its arrays are not copied.
        let paths = state.orderedPaths
        let models = state.ordered
        let revisions = state.revisions
        let documents = state.view.documents
        // A few paths, or a small share of them all, move one by one (a search and a splice each);
        // more are cheaper in one pass over every model.
        guard let changed, Self.placesOneByOne(changed.count, of: paths.count) else {
            state.queryView!.rebuild(documents: documents, paths: paths, models: models, revisions: revisions)
            return
        }
        state.queryView!.update(changed, documents: documents) { path in
            let index = binarySearch(paths, path)
            return index < paths.count && paths[index] == path ? (models[index], revisions[index]) : nil
        }
    }

    /// Points the view at the listened query (nil shows every model in path order). Returns
    /// whether what is shown may have changed.
    static func setQueryView(_ query: Query, in state: inout State) -> Bool {
        let view = QueryView<T>(query)
        if view == nil && state.queryView == nil { return false }
        state.queryView = view
        refreshQueryView(nil, in: &state)
        return true
    }

    private static func placeModels(_ fresh: DecodedModels, into state: inout State) {
        // Many paths at once (a snapshot, a large batch): one merge pass instead of an insertion
        // each, which would be quadratic.
        if !placesOneByOne(fresh.changed.count, of: state.orderedPaths.count) {
            merge(fresh, into: &state)
            return
        }
        var next = 0
        for path in fresh.changed {
            let model: T?
            if next < fresh.paths.count && fresh.paths[next] == path {
                model = fresh.models[next]
                next += 1
            } else {
                model = nil
            }
            let index = binarySearch(state.orderedPaths, path)
            let present = index < state.orderedPaths.count && state.orderedPaths[index] == path
            switch (model, present) {
            case (let model?, true):
                state.ordered[index] = model
                state.revisions[index] = state.nextRevision
                state.nextRevision += 1
            case (let model?, false):
                state.orderedPaths.insert(path, at: index)
                state.ordered.insert(model, at: index)
                state.revisions.insert(state.nextRevision, at: index)
                state.nextRevision += 1
            case (nil, true):
                state.orderedPaths.remove(at: index)
                state.ordered.remove(at: index)
                state.revisions.remove(at: index)
            case (nil, false):
                break
            }
        }
    }

    /// Whether `changed` paths among `total` are cheaper to place one by one (a binary search and a
    /// splice of one chunk each) than in a pass over all of them (which hashes every path).
    static func placesOneByOne(_ changed: Int, of total: Int) -> Bool {
        changed <= 64 || changed * 3 <= total
    }

    /// Puts decided models in place of those of their paths in one pass.
    static func merge(_ fresh: DecodedModels, into state: inout State) {
        if state.orderedPaths.isEmpty {
            // Nothing to merge with (a first snapshot): the fresh models are the whole list.
            state.orderedPaths = ChunkedList(adopting: fresh.paths)
            state.ordered = ChunkedList(adopting: fresh.models)
            state.revisions = newRevisions(fresh.models.count, in: &state)
            return
        }
        // Built flat and adopted whole: a merge is O(n) anyway, and the first single change after it
        // pays one more pass to cut the lists into chunks.
        let changed = Set(fresh.changed)
        var orderedPaths: [DocumentPath] = []
        var ordered: [T] = []
        var revisions: [UInt64] = []
        orderedPaths.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        ordered.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        revisions.reserveCapacity(state.orderedPaths.count + fresh.paths.count)
        var next = 0
        var kept = zip(state.orderedPaths, state.ordered).makeIterator()
        var keptRevisions = state.revisions.makeIterator()
        while let (path, model) = kept.next(), let revision = keptRevisions.next() {
            guard !changed.contains(path) else { continue }
            while next < fresh.paths.count && fresh.paths[next] < path {
                orderedPaths.append(fresh.paths[next])
                ordered.append(fresh.models[next])
                revisions.append(state.nextRevision)
                state.nextRevision += 1
                next += 1
            }
            orderedPaths.append(path)
            ordered.append(model)
            revisions.append(revision)
        }
        for index in next..<fresh.paths.count {
            orderedPaths.append(fresh.paths[index])
            ordered.append(fresh.models[index])
            revisions.append(state.nextRevision)
            state.nextRevision += 1
        }
        state.orderedPaths = ChunkedList(adopting: orderedPaths)
        state.ordered = ChunkedList(adopting: ordered)
        state.revisions = ChunkedList(adopting: revisions)
    }

    /// `count` new revisions, in order.
    static func newRevisions(_ count: Int, in state: inout State) -> ChunkedList<UInt64> {
        let first = state.nextRevision
        state.nextRevision += UInt64(count)
        return ChunkedList(adopting: Array(first..<state.nextRevision))
    }

    static func binarySearch(_ paths: ChunkedList<DocumentPath>, _ path: DocumentPath) -> Int {
        paths.partitionIndex { $0 < path }
    }
}
