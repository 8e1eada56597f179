import ArgumentParser
import TandemCore

/// The query options `query` and `watch` share.
struct QueryOptions: ParsableArguments {
    @Flag(help: "Treat the path as a collection-group name: every collection with that name.")
    var group = false

    @Option(name: .customLong("where"), help: ArgumentHelp("A filter 'field op value', such as 'age >= 18' or 'tags array-contains \"new\"'.", valueName: "filter"))
    var filters: [String] = []

    @Option(name: .customLong("order-by"), help: ArgumentHelp("Order by a field, ascending (or with ':asc'), or descending with ':desc'.", valueName: "field[:asc|:desc]"))
    var orders: [String] = []

    @Option(help: "Keep the first N results.")
    var limit: Int?

    /// The query, in the order the options were given by kind: filters, orders, then the limit.
    func query() throws -> Query {
        var query = Query()
        for filter in filters {
            let (field, op, value) = try Self.parseFilter(filter)
            query = query.whereField(field, op, value)
        }
        for order in orders {
            let (name, descending) = try Self.parseOrder(order)
            query = query.order(by: try FieldPath(dotted: name), descending: descending)
        }
        if let limit { query = query.limit(to: limit) }
        _ = try CompiledQuery(query)
        return query
    }

    /// The target for a path: a document, a collection, or (with `--group`) a collection group.
    func target(_ path: String, allowDocument: Bool) throws -> ListenTarget {
        if group {
            guard !path.isEmpty, !path.contains("/") else {
                throw TandemError.invalidArgument("With --group, give a collection id such as 'reviews', not '\(path)'.")
            }
            return .collectionGroup(path, try query())
        }
        let segments = PathRules.splitAtSlashes(path)
        if allowDocument && segments.count % 2 == 0 {
            guard filters.isEmpty, orders.isEmpty, limit == nil else {
                throw TandemError.invalidArgument("\(path) is a document; --where, --order-by and --limit apply to collections.")
            }
            return .document(try DocumentPath(path))
        }
        return .collection(try CollectionPath(path), try query())
    }

    /// `field`, `field:asc` or `field:desc`; any other suffix is refused rather than read as part
    /// of the field's name.
    static func parseOrder(_ text: String) throws -> (field: String, descending: Bool) {
        guard let colon = text.lastIndex(of: ":") else { return (text, false) }
        switch text[text.index(after: colon)...] {
        case "asc": return (String(text[..<colon]), false)
        case "desc": return (String(text[..<colon]), true)
        case let suffix:
            throw TandemError.invalidArgument("--order-by '\(text)' ends in ':\(suffix)', which is neither ':asc' nor ':desc'; write field, field:asc or field:desc.")
        }
    }

    /// `field op value`: the value is JSON when it parses as JSON, else a bare string.
    static func parseFilter(_ text: String) throws -> (FieldPath, Query.FilterOperator, JSONValue) {
        let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard parts.count == 3 else {
            throw TandemError.invalidArgument("The filter '\(text)' needs three parts, 'field op value', such as 'age >= 18'.")
        }
        guard let op = Query.FilterOperator(rawValue: String(parts[1])) else {
            let known = Query.FilterOperator.allCases.map(\.rawValue).joined(separator: " ")
            throw TandemError.invalidArgument("Unknown operator '\(parts[1])' in '\(text)'; use one of: \(known).")
        }
        let valueText = String(parts[2])
        let value = (try? JSONText.parse(valueText)) ?? .string(valueText)
        return (try FieldPath(dotted: String(parts[0])), op, value)
    }
}

/// `tandem query COLLECTION …`.
struct QueryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Run a query once and print the documents, one JSON object per line."
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The collection path (or, with --group, the collection-group name).") var collection: String
    @OptionGroup var options: QueryOptions

    func run() async throws {
        try await reportingErrors {
            let target = try options.target(collection, allowDocument: false)
            let answer = try await server.connection().call("POST", "/v1/query", body: target.wireValue)
            for document in answer[field: "documents"]?.arrayValue ?? [] {
                Console.out(JSONText.encode(document))
            }
        }
    }
}
