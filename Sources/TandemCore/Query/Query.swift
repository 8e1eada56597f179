/// A query over the documents of a collection or collection group, built by chaining operations.
///
/// Operations are kept in the order they were chained; two queries are equal exactly when their
/// operations are. The same query gives the same result in the client cache and on the server,
/// because both run ``evaluate(_:)``.
///
/// ```swift
/// let topAdults = Query()
///     .whereField("age", isGreaterThanOrEqualTo: 18)
///     .order(by: "score", descending: true)
///     .limit(to: 10)
/// let result = try topAdults.evaluate(documents)
/// ```
public struct Query: Sendable, Hashable, Codable {
    /// One chained operation.
    public enum Operation: Sendable, Hashable, Codable {
        case filter(field: FieldPath, op: FilterOperator, value: JSONValue)
        case order(field: FieldPath, descending: Bool)
        case limit(Int)
        case limitToLast(Int)
        case cursor(CursorPosition, values: [JSONValue])
    }

    /// A filter's comparison, named as on the wire.
    public enum FilterOperator: String, Sendable, Hashable, Codable, CaseIterable {
        case equal = "=="
        case notEqual = "!="
        case lessThan = "<"
        case lessThanOrEqual = "<="
        case greaterThan = ">"
        case greaterThanOrEqual = ">="
        case arrayContains = "array-contains"
        case arrayContainsAny = "array-contains-any"
        case `in` = "in"
        case notIn = "not-in"
    }

    /// Where a cursor bounds the ordered results.
    public enum CursorPosition: String, Sendable, Hashable, Codable {
        case startAt, startAfter, endAt, endBefore
    }

    /// The operations in the order they were chained.
    public private(set) var operations: [Operation]

    /// An empty query: every document, ordered by path.
    public init() {
        operations = []
    }

    /// A query made of the given operations, in order.
    public init(operations: [Operation]) {
        self.operations = operations
    }

    private func appending(_ operation: Operation) -> Query {
        var copy = self
        copy.operations.append(operation)
        return copy
    }

    // MARK: Filters

    /// Keeps documents whose field compares to the value with the operator.
    public func whereField(_ field: FieldPath, _ op: FilterOperator, _ value: JSONValue) -> Query {
        appending(.filter(field: field, op: op, value: value))
    }

    public func whereField(_ field: FieldPath, isEqualTo value: JSONValue) -> Query { whereField(field, .equal, value) }
    public func whereField(_ field: FieldPath, isNotEqualTo value: JSONValue) -> Query { whereField(field, .notEqual, value) }
    public func whereField(_ field: FieldPath, isLessThan value: JSONValue) -> Query { whereField(field, .lessThan, value) }
    public func whereField(_ field: FieldPath, isLessThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, .lessThanOrEqual, value)
    }
    public func whereField(_ field: FieldPath, isGreaterThan value: JSONValue) -> Query { whereField(field, .greaterThan, value) }
    public func whereField(_ field: FieldPath, isGreaterThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, .greaterThanOrEqual, value)
    }
    /// Keeps documents whose array field contains the value.
    public func whereField(_ field: FieldPath, arrayContains value: JSONValue) -> Query { whereField(field, .arrayContains, value) }
    /// Keeps documents whose array field contains any of the values.
    public func whereField(_ field: FieldPath, arrayContainsAny values: [JSONValue]) -> Query {
        whereField(field, .arrayContainsAny, .array(values))
    }
    /// Keeps documents whose field equals one of the values.
    public func whereField(_ field: FieldPath, in values: [JSONValue]) -> Query { whereField(field, .in, .array(values)) }
    /// Keeps documents whose field exists, is not null, and equals none of the values.
    public func whereField(_ field: FieldPath, notIn values: [JSONValue]) -> Query { whereField(field, .notIn, .array(values)) }

    // MARK: Order, limits, cursors

    /// Orders by a field, ascending unless `descending`. Later orders break ties of earlier ones;
    /// remaining ties are broken by document path.
    public func order(by field: FieldPath, descending: Bool = false) -> Query {
        appending(.order(field: field, descending: descending))
    }

    /// Keeps the first `count` results. The last limit set wins.
    public func limit(to count: Int) -> Query { appending(.limit(count)) }

    /// Keeps the last `count` results, still in query order. Needs an order. The last limit set wins.
    public func limit(toLast count: Int) -> Query { appending(.limitToLast(count)) }

    /// Starts at the documents whose order fields equal these values (one value per order, in order).
    public func start(at values: JSONValue...) -> Query { appending(.cursor(.startAt, values: values)) }
    /// Starts after the documents whose order fields equal these values.
    public func start(after values: JSONValue...) -> Query { appending(.cursor(.startAfter, values: values)) }
    /// Ends at the documents whose order fields equal these values.
    public func end(at values: JSONValue...) -> Query { appending(.cursor(.endAt, values: values)) }
    /// Ends before the documents whose order fields equal these values.
    public func end(before values: JSONValue...) -> Query { appending(.cursor(.endBefore, values: values)) }

    /// A cursor with its values as an array.
    public func cursor(_ position: CursorPosition, values: [JSONValue]) -> Query {
        appending(.cursor(position, values: values))
    }
}

/// What a query needs of a document: its path and its fields.
public protocol QueryDocument {
    var path: DocumentPath { get }
    var data: JSONObject { get }
}
