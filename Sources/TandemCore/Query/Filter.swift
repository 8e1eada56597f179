/// A filter a query keeps documents by: one field compared with a value, or filters combined with
/// `and` (every one holds) and `or` (at least one holds), nested as deep as needed.
///
/// Build them as Firestore's `Filter` is built, and give one to ``Query/whereFilter(_:)``:
///
/// ```swift
/// let openOrMine = Query()
///     .whereField("room", isEqualTo: "lobby")
///     .whereFilter(Filter.orFilter([
///         Filter.whereField("status", isEqualTo: "open"),
///         Filter.andFilter([
///             Filter.whereField("owner", isEqualTo: "ada"),
///             Filter.whereField("priority", isGreaterThan: 2),
///         ]),
///     ]))
/// ```
///
/// A document passes an `or` when it passes any of its filters, and each filter decides as it
/// does alone: a filter on a field the document lacks does not hold, whichever branch it is in.
/// `in`, `not-in` and `array-contains-any` stay as they are, one filter each.
///
/// A query refuses (with `invalid-argument`) an `and` or an `or` without filters, and filters
/// that make more than ``CompiledQuery/maximumDisjunctions`` disjunctions once multiplied out
/// (each `or`'s branches add up; an `and` multiplies its filters' counts), as Firestore does.
public enum Filter: Sendable, Hashable, Codable {
    /// Keeps documents whose field compares to the value with the operator, as
    /// ``Query/whereField(_:_:_:)`` does.
    case field(field: FieldPath, op: Query.FilterOperator, value: JSONValue)
    /// Keeps documents that pass every one of the filters.
    case and([Filter])
    /// Keeps documents that pass at least one of the filters.
    case or([Filter])

    // MARK: Combining

    /// Keeps documents that pass at least one of the filters (Firestore's `Filter.orFilter`).
    public static func orFilter(_ filters: [Filter]) -> Filter { .or(filters) }

    /// Keeps documents that pass every one of the filters (Firestore's `Filter.andFilter`).
    public static func andFilter(_ filters: [Filter]) -> Filter { .and(filters) }

    // MARK: Field filters

    /// Keeps documents whose field compares to the value with the operator.
    public static func whereField(_ field: FieldPath, _ op: Query.FilterOperator, _ value: JSONValue) -> Filter {
        .field(field: field, op: op, value: value)
    }

    /// Keeps documents whose field equals the value (`==`; an int and a double compare as numbers).
    public static func whereField(_ field: FieldPath, isEqualTo value: JSONValue) -> Filter { whereField(field, .equal, value) }
    /// Keeps documents whose field exists, is not null, and does not equal the value (`!=`).
    public static func whereField(_ field: FieldPath, isNotEqualTo value: JSONValue) -> Filter { whereField(field, .notEqual, value) }
    /// Keeps documents whose field is below the value (`<`), comparing only values of one type.
    public static func whereField(_ field: FieldPath, isLessThan value: JSONValue) -> Filter { whereField(field, .lessThan, value) }
    /// Keeps documents whose field is below or equal to the value (`<=`), comparing only values of
    /// one type.
    public static func whereField(_ field: FieldPath, isLessThanOrEqualTo value: JSONValue) -> Filter {
        whereField(field, .lessThanOrEqual, value)
    }
    /// Keeps documents whose field is above the value (`>`), comparing only values of one type.
    public static func whereField(_ field: FieldPath, isGreaterThan value: JSONValue) -> Filter { whereField(field, .greaterThan, value) }
    /// Keeps documents whose field is above or equal to the value (`>=`), comparing only values of
    /// one type.
    public static func whereField(_ field: FieldPath, isGreaterThanOrEqualTo value: JSONValue) -> Filter {
        whereField(field, .greaterThanOrEqual, value)
    }
    /// Keeps documents whose array field contains the value.
    public static func whereField(_ field: FieldPath, arrayContains value: JSONValue) -> Filter { whereField(field, .arrayContains, value) }
    /// Keeps documents whose array field contains any of the values.
    public static func whereField(_ field: FieldPath, arrayContainsAny values: [JSONValue]) -> Filter {
        whereField(field, .arrayContainsAny, .array(values))
    }
    /// Keeps documents whose field equals one of the values.
    public static func whereField(_ field: FieldPath, in values: [JSONValue]) -> Filter { whereField(field, .in, .array(values)) }
    /// Keeps documents whose field exists, is not null, and equals none of the values.
    public static func whereField(_ field: FieldPath, notIn values: [JSONValue]) -> Filter { whereField(field, .notIn, .array(values)) }
}

extension Query {
    /// Keeps documents that pass the filter: a field filter (the same operation
    /// ``whereField(_:_:_:)`` appends), or an `and` or `or` of filters, kept in chain order with
    /// the query's other operations.
    ///
    /// ```swift
    /// let lampsOrCheap = Query().whereFilter(Filter.orFilter([
    ///     Filter.whereField("category", isEqualTo: "lamps"),
    ///     Filter.whereField("price", isLessThan: 100),
    /// ]))
    /// ```
    public func whereFilter(_ filter: Filter) -> Query {
        if case .field(let field, let op, let value) = filter { return whereField(field, op, value) }
        return Query(operations: operations + [.compositeFilter(filter)])
    }
}
