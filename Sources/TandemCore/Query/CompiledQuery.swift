/// A validated query, ready to run: filters, orders, the effective cursors and limit.
///
/// Validation follows the rules users know from Firestore: `in`, `not-in` and `array-contains-any`
/// take a non-empty array; `null` and `NaN` only compare with `==` and `!=`; `limit(toLast:)` needs an
/// order; a cursor has at most one value per order.
public struct CompiledQuery: Sendable, Hashable {
    package struct Filter: Sendable, Hashable {
        package var field: FieldPath
        package var op: Query.FilterOperator
        package var value: JSONValue
    }

    package struct Order: Sendable, Hashable {
        package var field: FieldPath
        package var descending: Bool
    }

    package struct Cursor: Sendable, Hashable {
        package var values: [JSONValue]
        /// Whether documents equal to the cursor are kept.
        package var inclusive: Bool
    }

    package enum Limit: Sendable, Hashable {
        case first(Int)
        case last(Int)
    }

    package private(set) var filters: [Filter] = []
    package private(set) var orders: [Order] = []
    package private(set) var start: Cursor?
    package private(set) var end: Cursor?
    package private(set) var limit: Limit?

    /// Validates a query. Every problem throws `invalid-argument` saying which operation is wrong.
    public init(_ query: Query) throws(TandemError) {
        var cursors: [(Query.CursorPosition, [JSONValue])] = []
        for operation in query.operations {
            switch operation {
            case .filter(let field, let op, let value):
                try Self.validateField(field)
                try Self.validateFilter(field: field, op: op, value: value)
                filters.append(Filter(field: field, op: op, value: value))
            case .order(let field, let descending):
                try Self.validateField(field)
                orders.append(Order(field: field, descending: descending))
            case .limit(let count):
                guard count >= 0 else { throw TandemError.invalidArgument("limit(to: \(count)) is negative; pass 0 or more.") }
                limit = .first(count)
            case .limitToLast(let count):
                guard count >= 0 else { throw TandemError.invalidArgument("limit(toLast: \(count)) is negative; pass 0 or more.") }
                limit = .last(count)
            case .cursor(let position, let values):
                cursors.append((position, values))
            }
        }
        if case .last = limit, orders.isEmpty {
            throw TandemError.invalidArgument("limit(toLast:) needs at least one order(by:) to say which end is last.")
        }
        for (position, values) in cursors {
            guard values.count <= orders.count else {
                throw TandemError.invalidArgument("The \(position.rawValue) cursor has \(values.count) values but the query has \(orders.count) order(by:) fields; give at most one value per order.")
            }
            switch position {
            case .startAt: start = Cursor(values: values, inclusive: true)
            case .startAfter: start = Cursor(values: values, inclusive: false)
            case .endAt: end = Cursor(values: values, inclusive: true)
            case .endBefore: end = Cursor(values: values, inclusive: false)
            }
        }
    }

    private static func validateField(_ field: FieldPath) throws(TandemError) {
        guard field.isValid else {
            throw TandemError.invalidArgument("Field path '\(field)' has an empty key; name fields like 'address.city'.")
        }
    }

    private static func validateFilter(field: FieldPath, op: Query.FilterOperator, value: JSONValue) throws(TandemError) {
        switch op {
        case .in, .notIn, .arrayContainsAny:
            guard case .array(let values) = value else {
                throw TandemError.invalidArgument("'\(op.rawValue)' on '\(field)' needs an array of values, got \(value.typeName).")
            }
            guard !values.isEmpty else {
                throw TandemError.invalidArgument("'\(op.rawValue)' on '\(field)' needs at least one value.")
            }
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            if value.isNull {
                throw TandemError.invalidArgument("'\(op.rawValue)' on '\(field)' compares with null; null only supports '==' and '!='.")
            }
            if case .double(let double) = value, double.isNaN {
                throw TandemError.invalidArgument("'\(op.rawValue)' on '\(field)' compares with NaN; NaN only supports '==' and '!='.")
            }
        case .equal, .notEqual, .arrayContains:
            break
        }
    }
}
