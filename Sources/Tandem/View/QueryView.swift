import TandemCore

/// An engine's query run over its local view (the cache with pending writes applied): the models
/// that pass the filters and cursors, in the query's order, and the limit's window of them. The
/// same evaluator as the server's (`CompiledQuery`), so once every write is acknowledged the view
/// equals the server's answer for the same documents.
///
/// Kept up to date change by change: a changed document leaves its old place and takes its new
/// one by binary search, so a single write costs O(log n) comparisons plus moving within one chunk
/// of the lists. A change of many documents (a snapshot) sorts the whole view again.
struct QueryView<T> {
    /// A member's place in the order: its order fields' values, then its path.
    struct Key: Sendable {
        var values: [JSONValue?]
        var path: DocumentPath
    }

    let query: CompiledQuery
    /// The members, in query order, and their models. Chunked, so that a copy published to
    /// readers costs a change little (see `ChunkedList`).
    private(set) var keys = ChunkedList<Key>()
    private(set) var models = ChunkedList<T>()
    /// Each member's revision (see the engine's `revisions`), in the same order: a reader finds
    /// which shown members changed without searching for each in path order.
    private(set) var revisions = ChunkedList<UInt64>()
    /// Each member's order values, to find its place when it changes.
    private var members: [DocumentPath: [JSONValue?]] = [:]
    /// The limit's window of `models`: what is shown.
    private(set) var window: Range<Int> = 0..<0

    /// What the engine shows, in one array (a copy of the window, or the members' shared storage).
    var shown: [T] { models.elements(in: window) }

    /// The view of a query, or nil when the query keeps every document in path order (no filter,
    /// order, cursor or limit): the models as they are already are its answer. An invalid query is
    /// refused by the server, and leaves the view as it was.
    init?(_ query: Query) {
        guard let compiled = try? CompiledQuery(query) else { return nil }
        if compiled.filters.isEmpty && compiled.orders.isEmpty && compiled.start == nil && compiled.end == nil && compiled.limit == nil {
            return nil
        }
        self.query = compiled
    }

    /// Whether a document passes the query's filters and cursors (its limit aside).
    func admits(_ document: Document) -> Bool {
        query.matchesFiltersAndCursors(document.data)
    }

    /// Whether the document at `path` is shown (a member inside the limit's window).
    func shows(_ path: DocumentPath) -> Bool {
        guard let values = members[path] else { return false }
        let index = position(of: Key(values: values, path: path))
        return window.contains(index)
    }

    /// The paths shown, in order.
    var shownPaths: [DocumentPath] { keys[window].map(\.path) }

    /// Builds the view anew from every model (in path order) and the documents they stand for.
    mutating func rebuild(documents: [DocumentPath: Document], paths: ChunkedList<DocumentPath>, models all: ChunkedList<T>, revisions allRevisions: ChunkedList<UInt64>) {
        var keys: [Key] = []
        var indices: [Int] = []
        for (index, path) in paths.enumerated() {
            guard let document = documents[path], query.matchesFilters(document.data) else { continue }
            let values = query.orderValues(document.data)
            guard query.passesCursors(values) else { continue }
            keys.append(Key(values: values, path: path))
            indices.append(index)
        }
        // Models come in path order, which is the query's order when it has no order(by:). Sort
        // positions rather than (key, model) pairs: generic models move slowly.
        if !query.orders.isEmpty {
            let query = self.query
            var order = Array(keys.indices)
            order.sort { query.sortsBefore(keys[$0].values, keys[$0].path, keys[$1].values, keys[$1].path) }
            keys = order.map { keys[$0] }
            indices = order.map { indices[$0] }
        }
        // Adopted whole (a rebuild is O(n log n) anyway): cut into chunks at the first single change.
        self.keys = ChunkedList(adopting: keys)
        if query.orders.isEmpty {
            // Positions in path order, increasing: one walk over the models, no search per model.
            var wanted = indices.makeIterator()
            var next = wanted.next()
            var chosen: [T] = []
            var chosenRevisions: [UInt64] = []
            chosen.reserveCapacity(indices.count)
            chosenRevisions.reserveCapacity(indices.count)
            for ((index, model), revision) in zip(all.enumerated(), allRevisions) where index == next {
                chosen.append(model)
                chosenRevisions.append(revision)
                next = wanted.next()
            }
            models = ChunkedList(adopting: chosen)
            revisions = ChunkedList(adopting: chosenRevisions)
        } else {
            models = ChunkedList(adopting: indices.map { all[$0] })
            revisions = ChunkedList(adopting: indices.map { allRevisions[$0] })
        }
        members = Dictionary(uniqueKeysWithValues: keys.map { ($0.path, $0.values) })
        reshow()
    }

    /// Moves the documents at `changed` to their new places: out if gone, undecodable or no longer
    /// passing, in with their model and its revision (`model(path)`) otherwise.
    mutating func update(_ changed: [DocumentPath], documents: [DocumentPath: Document], model: (DocumentPath) -> (T, UInt64)?) {
        for path in changed {
            var old: Int?
            if let values = members.removeValue(forKey: path) {
                let index = position(of: Key(values: values, path: path))
                if index < keys.count && keys[index].path == path {
                    old = index
                } else {
                    // Not where its key says: never expected, but a linear search keeps the view right.
                    old = keys.firstIndex { $0.path == path }
                }
            }
            var new: (key: Key, model: T, revision: UInt64)?
            if let document = documents[path], query.matchesFilters(document.data), let member = model(path) {
                let values = query.orderValues(document.data)
                if query.passesCursors(values) { new = (Key(values: values, path: path), member.0, member.1) }
            }
            switch (old, new) {
            case (let old?, let new?):
                // Still a member: out of its old place, into its new one.
                keys.remove(at: old)
                models.remove(at: old)
                revisions.remove(at: old)
                let index = position(of: new.key)
                keys.insert(new.key, at: index)
                models.insert(new.model, at: index)
                revisions.insert(new.revision, at: index)
                members[path] = new.key.values
            case (let old?, nil):
                keys.remove(at: old)
                models.remove(at: old)
                revisions.remove(at: old)
            case (nil, let new?):
                let index = position(of: new.key)
                keys.insert(new.key, at: index)
                models.insert(new.model, at: index)
                revisions.insert(new.revision, at: index)
                members[path] = new.key.values
            case (nil, nil):
                break
            }
        }
        reshow()
    }

    /// The first index whose key does not come before `key`.
    private func position(of key: Key) -> Int {
        let query = self.query
        return keys.partitionIndex { query.sortsBefore($0.values, $0.path, key.values, key.path) }
    }

    private mutating func reshow() {
        switch query.limit {
        case nil:
            window = 0..<models.count
        case .first(let count):
            window = 0..<min(count, models.count)
        case .last(let count):
            window = max(0, models.count - count)..<models.count
        }
    }
}
