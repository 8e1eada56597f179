extension Filter {
    /// The filter on the wire: a field filter is `{"where": "age", "op": ">=", "value": 18}`, the
    /// operation a query's `whereField` writes; `{"or": [filter, …]}` and `{"and": [filter, …]}`
    /// hold filters of any of the three forms.
    ///
    /// ```json
    /// {"or": [{"where": "status", "op": "==", "value": "open"},
    ///         {"and": [{"where": "owner", "op": "==", "value": "ada"}, {"where": "priority", "op": ">", "value": 2}]}]}
    /// ```
    public var wireValue: JSONValue {
        switch self {
        case .field(let field, let op, let value):
            return .object(["where": .string(field.description), "op": .string(op.rawValue), "value": value])
        case .and(let filters):
            return .object(["and": .array(filters.map(\.wireValue))])
        case .or(let filters):
            return .object(["or": .array(filters.map(\.wireValue))])
        }
    }

    /// The keys that say an object of a wire query is a filter, and which kind.
    static let wireKeys = ["where", "or", "and"]

    /// Reads a filter from its wire object; its errors name the object by its `context`
    /// ("query operation 2", "filter 1 of the or in query operation 2"). Only the form is checked
    /// here: ``CompiledQuery`` validates the filter with the rest of the query.
    package init(wire object: WireObject) throws(TandemError) {
        let named = Self.wireKeys.filter { object.has($0) }
        let others = Query.operationKeys.filter { !Self.wireKeys.contains($0) && object.has($0) }
        if !others.isEmpty {
            throw TandemError.invalidArgument("\(object.context.capitalizedFirst) names \(others.joined(separator: " and ")), which is not a filter: an or or an and holds filters only, each an object with one of where, or, and.")
        }
        guard named.count == 1 else {
            if named.isEmpty {
                throw TandemError.invalidArgument("\(object.context.capitalizedFirst) is not a filter: an or or an and holds filters only, each an object with one of where, or, and.")
            }
            throw TandemError.invalidArgument("\(object.context.capitalizedFirst) names \(named.joined(separator: " and ")); give each its own filter, one key each.")
        }
        switch named[0] {
        case "where":
            let opText = try object.string("op")
            guard let op = Query.FilterOperator(rawValue: opText) else {
                let known = Query.FilterOperator.allCases.map(\.rawValue).joined(separator: ", ")
                throw TandemError.invalidArgument("Unknown filter operator '\(opText)' in \(object.context); use one of \(known).")
            }
            self = .field(field: try FieldPath(dotted: try object.string("where")), op: op, value: try object.value("value"))
        default:
            let kind = named[0]
            let entries = try object.array(kind)
            guard !entries.isEmpty else {
                throw TandemError.invalidArgument("The \(kind) in \(object.context) has no filters; give it at least one.")
            }
            var filters: [Filter] = []
            filters.reserveCapacity(entries.count)
            for (index, entry) in entries.enumerated() {
                filters.append(try Filter(wire: try WireObject(entry, context: "filter \(index + 1) of the \(kind) in \(object.context)")))
            }
            self = kind == "or" ? .or(filters) : .and(filters)
        }
    }
}
