import TandemCore

/// How an edit of synced state becomes writes, as pure functions: the value before and after the
/// edit are compared element by element, by `clientId`, never against a read of the server.
///
/// - An element that is new becomes a merge of its fields (it has its `documentId` by then): a
///   document of that id made meanwhile elsewhere keeps the fields this value does not have.
/// - An element that changed becomes a merge of exactly the field paths that changed: a nested map
///   is compared key by key, any other value (arrays included) whole; a field that went is removed.
/// - An element that went becomes a delete. Nothing else is ever deleted: a document another client
///   added, which this value never held, is never touched.
/// - An element moved, and nothing else, writes nothing.
enum SyncedEdits {
    /// One element of a value, as the diff reads it.
    struct Element: Sendable {
        var documentId: String
        var body: JSONObject
    }

    /// The writes of one edit, in `collection`, keyed by `clientId`: `before` holds the old state
    /// of the elements the edit changed or removed, `after` the new state of those it changed or
    /// added (elements in neither are untouched, as the caller found without encoding them).
    /// Elements on both sides are diffed when listed in `changed`.
    static func writes<Key: Hashable>(before: [(Key, Element)], after: [(Key, Element)], changed: Set<Key>,
                                      in collection: CollectionPath) throws(TandemError) -> [Mutation] {
        let old = Dictionary(before, uniquingKeysWith: { first, _ in first })
        let kept = Set(after.map(\.0))
        var writes: [Mutation] = []
        for (key, new) in after {
            let path = try collection.document(new.documentId)
            guard let previous = old[key], previous.documentId == new.documentId else {
                if let previous = old[key] {
                    // Given another document id: the old document goes, the new one is made.
                    writes.append(.delete(try collection.document(previous.documentId)))
                }
                writes.append(.merge(path, new.body))
                continue
            }
            guard changed.contains(key) else { continue }
            let paths = changedPaths(previous.body, new.body)
            guard !paths.isEmpty else { continue }
            var fields: [FieldPath] = []
            for segments in paths {
                guard let field = try? FieldPath(segments) else {
                    // A key no field path can name (an empty one): the body is written whole.
                    fields = []
                    break
                }
                fields.append(field)
            }
            writes.append(fields.isEmpty ? .set(path, new.body) : .merge(path, new.body, fields: fields))
        }
        for (key, previous) in before where !kept.contains(key) {
            writes.append(.delete(try collection.document(previous.documentId)))
        }
        return writes
    }

    /// The field paths whose values differ between two bodies, in key order: a map present on both
    /// sides is gone into; any other difference (a value added, removed or changed) is its path.
    static func changedPaths(_ old: JSONObject, _ new: JSONObject, prefix: [String] = []) -> [[String]] {
        var paths: [[String]] = []
        for key in Set(old.keys).union(new.keys).sorted() {
            let before = old[key]
            let after = new[key]
            // Byte for byte: an edit that only respells a string (é decomposed for precomposed) is
            // an edit the server must store, or the value and the server would differ for good.
            if let before, let after, JSONValue.identical(before, after) { continue }
            if before == nil && after == nil { continue }
            if case .object(let a)? = before, case .object(let b)? = after {
                paths += changedPaths(a, b, prefix: prefix + [key])
            } else {
                paths.append(prefix + [key])
            }
        }
        return paths
    }
}
