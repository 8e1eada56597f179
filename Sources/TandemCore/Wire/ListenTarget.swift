/// What a listener or a one-off read covers: one document, a query over one collection, or a query
/// over a collection group (every collection with one name).
public enum ListenTarget: Sendable, Hashable, CustomStringConvertible {
    /// One document, by path.
    case document(DocumentPath)
    /// A query over the documents directly in one collection.
    case collection(CollectionPath, Query)
    /// A query over every collection with this name (a collection id such as `reviews`), under any parent.
    case collectionGroup(String, Query)

    /// Whether a document at this path is in the target's scope (before the query's filters).
    public func covers(_ path: DocumentPath) -> Bool {
        switch self {
        case .document(let document): return document == path
        case .collection(let collection, _): return collection.contains(path)
        case .collectionGroup(let group, _): return PathRules.sameBytes(path.collectionGroup, group)
        }
    }

    /// The query, or nil for a document target.
    public var query: Query? {
        switch self {
        case .document: return nil
        case .collection(_, let query), .collectionGroup(_, let query): return query
        }
    }

    public var description: String {
        switch self {
        case .document(let path): return "document \(path)"
        case .collection(let path, _): return "collection \(path)"
        case .collectionGroup(let group, _): return "collection group \(group)"
        }
    }

    /// `{"document": path}`, `{"collection": path, "query": [...]}` or `{"group": name, "query": [...]}`.
    public var wireValue: JSONValue {
        switch self {
        case .document(let path):
            return .object(["document": .string(path.description)])
        case .collection(let path, let query):
            return .object(["collection": .string(path.description), "query": query.wireValue])
        case .collectionGroup(let group, let query):
            return .object(["group": .string(group), "query": query.wireValue])
        }
    }

    /// Reads a target in its wire form (see `wireValue`); one without a `query` gets the empty query.
    /// A malformed one throws `invalid-argument`.
    public init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "the target")
        let query = object.has("query") ? try Query(wire: try object.value("query")) : Query()
        if object.has("document") {
            self = .document(try object.documentPath("document"))
        } else if object.has("collection") {
            self = .collection(try object.collectionPath("collection"), query)
        } else if object.has("group") {
            let group = try object.string("group")
            guard !group.isEmpty, !group.contains("/") else {
                throw TandemError.invalidArgument("A collection-group name is one collection id such as 'reviews', not '\(group)'.")
            }
            self = .collectionGroup(group, query)
        } else {
            throw TandemError.invalidArgument("A target needs 'document', 'collection' or 'group'.")
        }
    }
}
