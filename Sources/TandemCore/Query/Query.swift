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
///
/// Filters combine with `or` (and `and`) through ``Filter`` and ``whereFilter(_:)``:
///
/// ```swift
/// let adultsInLondonOrParis = Query()
///     .whereField("age", isGreaterThanOrEqualTo: 18)
///     .whereFilter(Filter.orFilter([
///         Filter.whereField("address.city", isEqualTo: "London"),
///         Filter.whereField("address.city", isEqualTo: "Paris"),
///     ]))
/// ```
public struct Query: Sendable, Hashable, Codable {
    /// One chained operation.
    public enum Operation: Sendable, Hashable, Codable {
        /// Keeps documents whose field compares to the value with the operator.
        case filter(field: FieldPath, op: FilterOperator, value: JSONValue)
        /// Keeps documents that pass an `and` or an `or` of filters (see ``Filter``).
        /// ``Query/whereFilter(_:)`` appends a field filter as ``filter(field:op:value:)`` instead.
        case compositeFilter(Filter)
        /// Orders by a field, ascending unless `descending`.
        case order(field: FieldPath, descending: Bool)
        /// Keeps the first results, at most this many.
        case limit(Int)
        /// Keeps the last results, at most this many; needs an order.
        case limitToLast(Int)
        /// Bounds the ordered results at these values of the order fields, at most one per order.
        case cursor(CursorPosition, values: [JSONValue])
    }

    /// A filter's comparison, named as on the wire.
    public enum FilterOperator: String, Sendable, Hashable, Codable, CaseIterable {
        /// `==`: the field equals the value (an int and a double compare as numbers).
        case equal = "=="
        /// `!=`: the field is present, not null, and does not equal the value.
        case notEqual = "!="
        /// `<`: the field is below the value and of its type; ints and doubles count as one type.
        case lessThan = "<"
        /// `<=`: as `lessThan`, or equal to the value.
        case lessThanOrEqual = "<="
        /// `>`: the field is above the value and of its type; ints and doubles count as one type.
        case greaterThan = ">"
        /// `>=`: as `greaterThan`, or equal to the value.
        case greaterThanOrEqual = ">="
        /// `array-contains`: the field is an array holding the value.
        case arrayContains = "array-contains"
        /// `array-contains-any`: the field is an array holding one of the values (an array operand).
        case arrayContainsAny = "array-contains-any"
        /// `in`: the field equals one of the values (an array operand).
        case `in` = "in"
        /// `not-in`: the field is present, not null, and equals none of the values (an array operand).
        case notIn = "not-in"
    }

    /// Where a cursor bounds the ordered results.
    public enum CursorPosition: String, Sendable, Hashable, Codable {
        /// Where the cursor bounds the results: `startAt` starts at the documents equal to it,
        /// `startAfter` after them, `endAt` ends at them, `endBefore` before them.
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

    /// Keeps documents whose field equals the value (`==`; an int and a double compare as numbers).
    public func whereField(_ field: FieldPath, isEqualTo value: JSONValue) -> Query { whereField(field, .equal, value) }
    /// Keeps documents whose field exists, is not null, and does not equal the value (`!=`).
    public func whereField(_ field: FieldPath, isNotEqualTo value: JSONValue) -> Query { whereField(field, .notEqual, value) }
    /// Keeps documents whose field is below the value (`<`), comparing only values of one
    /// type: numbers with numbers, strings with strings.
    public func whereField(_ field: FieldPath, isLessThan value: JSONValue) -> Query { whereField(field, .lessThan, value) }
    /// Keeps documents whose field is below or equal to the value (`<=`), comparing only values of one
    /// type: numbers with numbers, strings with strings.
    public func whereField(_ field: FieldPath, isLessThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, .lessThanOrEqual, value)
    }
    /// Keeps documents whose field is above the value (`>`), comparing only values of one
    /// type: numbers with numbers, strings with strings.
    public func whereField(_ field: FieldPath, isGreaterThan value: JSONValue) -> Query { whereField(field, .greaterThan, value) }
    /// Keeps documents whose field is above or equal to the value (`>=`), comparing only values of one
    /// type: numbers with numbers, strings with strings.
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
    /// The document's path, which breaks the ties of a query's orders.
    var path: DocumentPath { get }
    /// The document's fields, which filters, orders and cursors read.
    var data: JSONObject { get }
}
