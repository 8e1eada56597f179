extension Query {
    /// The query on the wire: its operations in chain order, each one object —
    /// `{"where": "age", "op": ">=", "value": 18}`, `{"orderBy": "score", "descending": true}`,
    /// `{"limit": 10}`, `{"limitToLast": 10}`, `{"startAt": [...]}` (and `startAfter`, `endAt`, `endBefore`);
    /// composite filters `{"or": [filter, …]}` and `{"and": [filter, …]}`, each filter a `where`
    /// object or another `or` or `and` (see ``Filter/wireValue``).
    public var wireValue: JSONValue {
        .array(operations.map { operation -> JSONValue in
            switch operation {
            case .filter(let field, let op, let value):
                return Filter.field(field: field, op: op, value: value).wireValue
            case .compositeFilter(let filter):
                return filter.wireValue
            case .order(let field, let descending):
                return .object(["orderBy": .string(field.description), "descending": .bool(descending)])
            case .limit(let count):
                return .object(["limit": .int(count)])
            case .limitToLast(let count):
                return .object(["limitToLast": .int(count)])
            case .cursor(let position, let values):
                return .object([position.rawValue: .array(values)])
            }
        })
    }

    /// Reads a query in its wire form; it is validated too, so a bad query throws `invalid-argument`.
    public init(wire value: JSONValue) throws(TandemError) {
        guard case .array(let entries) = value else {
            throw TandemError.invalidArgument("A query must be an array of operations such as [{\"where\": \"age\", \"op\": \">=\", \"value\": 18}], got \(value.typeName).")
        }
        var operations: [Operation] = []
        for (index, entry) in entries.enumerated() {
            let object = try WireObject(entry, context: "query operation \(index + 1)")
            // One operation an object: one that names two is refused, not read as either.
            let named = Self.operationKeys.filter { object.has($0) }
            if named.count > 1 {
                throw TandemError.invalidArgument("Query operation \(index + 1) names \(named.joined(separator: " and ")); give each its own operation, one key each.")
            }
            if Filter.wireKeys.contains(where: { object.has($0) }) {
                switch try Filter(wire: object) {
                case .field(let field, let op, let value): operations.append(.filter(field: field, op: op, value: value))
                case let filter: operations.append(.compositeFilter(filter))
                }
            } else if object.has("orderBy") {
                operations.append(.order(field: try FieldPath(dotted: try object.string("orderBy")), descending: try object.bool("descending", default: false)))
            } else if object.has("limit") {
                operations.append(.limit(try object.int("limit")))
            } else if object.has("limitToLast") {
                operations.append(.limitToLast(try object.int("limitToLast")))
            } else if let position = [CursorPosition.startAt, .startAfter, .endAt, .endBefore].first(where: { object.has($0.rawValue) }) {
                operations.append(.cursor(position, values: try object.array(position.rawValue)))
            } else {
                throw TandemError.invalidArgument("Query operation \(index + 1) is none of where, or, and, orderBy, limit, limitToLast, startAt, startAfter, endAt, endBefore.")
            }
        }
        self.init(operations: operations)
        _ = try CompiledQuery(self)
    }

    /// The key that says which operation an object of a wire query is.
    static let operationKeys = ["where", "or", "and", "orderBy", "limit", "limitToLast", "startAt", "startAfter", "endAt", "endBefore"]
}
