/// A validated query, ready to run: filters, orders, the effective cursors and limit.
///
/// Validation follows the rules users know from Firestore: `in`, `not-in` and `array-contains-any`
/// take a non-empty array; `null` and `NaN` only compare with `==` and `!=`; `limit(toLast:)` needs an
/// order; a cursor has at most one value per order; an `and` or an `or` has at least one filter, and
/// the filters make at most ``maximumDisjunctions`` disjunctions once multiplied out.
public struct CompiledQuery: Sendable, Hashable {
    /// One field compared with a value.
    package struct FieldFilter: Sendable, Hashable {
        package var field: FieldPath
        package var op: Query.FilterOperator
        package var value: JSONValue
    }

    /// A validated filter: a field filter, or an `and` or `or` of two or more filters. Normalized:
    /// an `and` holds no `and` and an `or` no `or` (they are spliced into it), and one of a single
    /// filter is that filter.
    package enum Predicate: Sendable, Hashable {
        case field(FieldFilter)
        case and([Predicate])
        case or([Predicate])
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

    /// The query's filters, every one of which a document must pass. A composite filter's `and`
    /// is spliced in: only field filters and `or`s are here.
    package private(set) var filters: [Predicate] = []
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
                filters.append(.field(FieldFilter(field: field, op: op, value: value)))
            case .compositeFilter(let filter):
                switch try Self.compile(filter) {
                case .and(let all): filters += all
                case let predicate: filters.append(predicate)
                }
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
        let disjunctions = Self.disjunctionCount(.and(filters), cap: Self.maximumDisjunctions + 1)
        if disjunctions > Self.maximumDisjunctions {
            throw TandemError.invalidArgument("The query's filters make more than \(Self.maximumDisjunctions) disjunctions once multiplied out (an or's filters add up, an and multiplies them); at most \(Self.maximumDisjunctions) are allowed. Use fewer or-branches, or in for equalities on one field, or run several queries.")
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

    /// Validates a filter and normalizes it (see `Predicate`).
    private static func compile(_ filter: Filter) throws(TandemError) -> Predicate {
        switch filter {
        case .field(let field, let op, let value):
            try validateField(field)
            try validateFilter(field: field, op: op, value: value)
            return .field(FieldFilter(field: field, op: op, value: value))
        case .and(let filters):
            guard !filters.isEmpty else {
                throw TandemError.invalidArgument("Filter.andFilter([]) has no filters; give it at least one.")
            }
            var all: [Predicate] = []
            for filter in filters {
                switch try compile(filter) {
                case .and(let inner): all += inner
                case let predicate: all.append(predicate)
                }
            }
            return all.count == 1 ? all[0] : .and(all)
        case .or(let filters):
            guard !filters.isEmpty else {
                throw TandemError.invalidArgument("Filter.orFilter([]) has no filters; give it at least one (an or of nothing keeps nothing).")
            }
            var branches: [Predicate] = []
            for filter in filters {
                switch try compile(filter) {
                case .or(let inner): branches += inner
                case let predicate: branches.append(predicate)
                }
            }
            return branches.count == 1 ? branches[0] : .or(branches)
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
