import PostgresNIO
import TandemCore

/// What of a query's filters PostgreSQL can apply to `body` (the documents' `jsonb`) while it
/// reads, so a query reads its candidates instead of its whole collection.
///
/// Each condition is a **superset** of the filter it comes from: it never leaves out a document the
/// filter keeps, and the shared evaluator then decides every candidate exactly (types, missing
/// fields, numbers compared exactly across int and double, strings by their bytes). So only filters
/// whose matches containment (`@>`, which a GIN index serves) can find without loss are translated: `==`, `in`,
/// `array-contains` and `array-contains-any` with values that are strings (without NUL), booleans, null, or
/// numbers whose JSON text PostgreSQL compares exactly (integers of magnitude below 2^53, whose
/// double forms are written as those integers). Ranges keep values of their value's type, and
/// numbers by their integer part. Bodies and values are compared in Unicode's NFC
/// form, so keys match by canonical equivalence, as Swift's dictionaries find them, and values
/// whose bytes are equal are found (with some that are only canonically equal, which the
/// evaluator then leaves out). A document whose body
/// PostgreSQL could not store as `jsonb` is always a candidate. An `or` of filters is read as
/// the `OR` of its branches' conditions when every branch has one, and not narrowed otherwise. Every
/// value is a bind parameter: nothing of a query is written into the SQL's text.
struct PostgresQueryFilter {
    /// The conditions over `d.body`, with `$n` placeholders numbered from the `first` given; a
    /// document PostgreSQL could not hold as `jsonb` (its `body` NULL) is read beside them.
    var conditions: String
    /// The values the placeholders stand for, in order.
    var binds: [PostgresBind]

    /// The condition for `query`'s filters (nil when none can be translated), its placeholders
    /// numbered from `first`.
    ///
    /// Composite filters keep the rule of a superset: an `and` becomes the `AND` of what of it
    /// translates (leaving out a filter only keeps more); an `or` becomes the parenthesized `OR`
    /// of its branches only when every branch translates, since a branch left out would lose the
    /// documents only it keeps. An `or` with a branch that does not translate pushes nothing: the
    /// evaluator decides it over every candidate the rest of the query reads.
    init?(_ query: Query, firstPlaceholder first: Int) {
        var builder = Builder(first: first)
        var conditions: [String] = []
        for operation in query.operations {
            let condition: String?
            switch operation {
            case .filter(let field, let op, let value): condition = builder.condition(field, op, value)
            case .compositeFilter(let filter): condition = builder.condition(filter)
            case .order, .limit, .limitToLast, .cursor: condition = nil
            }
            if let condition { conditions.append(condition) }
        }
        guard !conditions.isEmpty else { return nil }
        self.conditions = conditions.joined(separator: " AND ")
        self.binds = builder.binds
    }

    /// Makes the conditions and collects their binds. A condition it does not make (nil) leaves
    /// ``binds`` as they were, so no placeholder is bound that the SQL does not use.
    private struct Builder {
        let first: Int
        var binds: [PostgresBind] = []

        init(first: Int) {
            self.first = first
        }

        mutating func placeholder(_ bind: PostgresBind) -> String {
            binds.append(bind)
            return "$\(first + binds.count - 1)"
        }

        // Compared as the bodies are stored: normalized (NFC), so text compares as Swift's strings
        // do, by canonical equivalence.
        mutating func json(_ value: JSONValue) -> String { "normalize(\(placeholder(.text(JSONText.encode(value)))), NFC)::jsonb" }

        /// A composite filter's condition: see ``PostgresQueryFilter/init(_:firstPlaceholder:)``.
        mutating func condition(_ filter: Filter) -> String? {
            switch filter {
            case .field(let field, let op, let value):
                return condition(field, op, value)
            case .and(let filters):
                var parts: [String] = []
                for filter in filters {
                    if let part = condition(filter) { parts.append(part) }
                }
                return parts.isEmpty ? nil : "(" + parts.joined(separator: " AND ") + ")"
            case .or(let filters):
                let mark = binds.count
                var parts: [String] = []
                for filter in filters {
                    guard let part = condition(filter) else {
                        // Bound for the branches before it, which are not used now.
                        binds.removeSubrange(mark...)
                        return nil
                    }
                    parts.append("(" + part + ")")
                }
                return parts.isEmpty ? nil : "(" + parts.joined(separator: " OR ") + ")"
            }
        }

        /// One field filter's condition, or nil when it has none that never leaves a match out.
        mutating func condition(_ field: FieldPath, _ op: Query.FilterOperator, _ value: JSONValue) -> String? {
            guard field.segments.allSatisfy(PostgresQueryFilter.storable) else { return nil }
            switch op {
            case .equal:
                guard PostgresQueryFilter.containable(value) else { return nil }
                return "d.body @> \(json(PostgresQueryFilter.nest(value, at: field)))"
            case .in:
                guard case .array(let wanted) = value, !wanted.isEmpty, wanted.count <= 100, wanted.allSatisfy(PostgresQueryFilter.containable) else { return nil }
                var parts: [String] = []
                for element in wanted { parts.append("d.body @> \(json(PostgresQueryFilter.nest(element, at: field)))") }
                return "(" + parts.joined(separator: " OR ") + ")"
            case .arrayContains:
                guard PostgresQueryFilter.containable(value) else { return nil }
                return "d.body @> \(json(PostgresQueryFilter.nest(.array([value]), at: field)))"
            case .arrayContainsAny:
                guard case .array(let wanted) = value, !wanted.isEmpty, wanted.count <= 100, wanted.allSatisfy(PostgresQueryFilter.containable) else { return nil }
                var parts: [String] = []
                for element in wanted { parts.append("d.body @> \(json(PostgresQueryFilter.nest(.array([element]), at: field)))") }
                return "(" + parts.joined(separator: " OR ") + ")"
            case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
                // A range keeps only values of its value's type; numbers also by their integer
                // part (clamped to ±2^53), which never orders two numbers the wrong way round.
                let type: String
                switch value {
                case .null: return nil
                case .bool: type = "boolean"
                case .string: type = "string"
                case .array: type = "array"
                case .object: type = "object"
                case .int, .double:
                    guard let bound = PostgresQueryFilter.integerPart(value) else { return nil }
                    let path = placeholder(.textArray(field.segments))
                    let comparison = op == .lessThan || op == .lessThanOrEqual ? "<=" : ">="
                    return "jsonb_typeof(d.body #> \(path)) = 'number' AND \(PostgresQueryFilter.integerPartSQL("d.body #> \(path)")) \(comparison) \(placeholder(.int(bound)))"
                }
                return "jsonb_typeof(d.body #> \(placeholder(.textArray(field.segments)))) = '\(type)'"
            case .notEqual, .notIn:
                return nil  // keeps nearly everything: read it all
            }
        }
    }

    /// Whether containment finds every stored value equal to `value` in the query order.
    static func containable(_ value: JSONValue) -> Bool {
        switch value {
        case .null, .bool: return true
        case .string(let string): return storable(string)
        case .int(let int): return int.magnitude < 1 << 53
        case .double(let double): return double.isFinite && double == double.rounded() && double.magnitude < 9_007_199_254_740_992
        case .array, .object: return false
        }
    }

    /// A number's integer part, clamped to ±2^53 (nil for NaN).
    static func integerPart(_ value: JSONValue) -> Int64? {
        let limit: Int64 = 9_007_199_254_740_992
        switch value {
        case .int(let int): return Int64(max(-limit, min(limit, Int64(int))))
        case .double(let double):
            guard !double.isNaN else { return nil }
            let floor = double.rounded(.down)
            if floor >= Double(limit) { return limit }
            if floor <= -Double(limit) { return -limit }
            return Int64(floor)
        default: return nil
        }
    }

    /// ``integerPart(_:)`` of a stored number, in SQL.
    static func integerPartSQL(_ value: String) -> String {
        "greatest(least(floor((\(value))::numeric), 9007199254740992), -9007199254740992)"
    }

    /// Whether jsonb can hold the text: not with a NUL character (nor, so, the documents that do).
    static func storable(_ text: String) -> Bool {
        !text.unicodeScalars.contains("\u{0000}")
    }

    /// `{"a": {"b": value}}` for the field `a.b`.
    static func nest(_ value: JSONValue, at field: FieldPath) -> JSONValue {
        field.segments.reversed().reduce(value) { inner, key in .object([key: inner]) }
    }
}

/// A value a query's SQL binds.
enum PostgresBind: Sendable {
    case text(String)
    case textArray([String])
    case int(Int64)
    case bytes([UInt8])

    func append(to binds: inout PostgresBindings) {
        switch self {
        case .text(let text): binds.append(text)
        case .textArray(let texts): binds.append(texts)
        case .int(let value): binds.append(value)
        case .bytes(let bytes): binds.append(ByteBuffer(bytes: bytes))
        }
    }
}

/// A query's first order in SQL, as a key that never puts two documents in the opposite order to
/// the query's: missing first, then by type, then numbers by their integer part within ±2^53 and
/// strings by their UTF-8 bytes (read from the exact text, as `body` holds them normalized);
/// arrays and objects tie. With it PostgreSQL reads in the query's order, so:
///
/// - **cursors** narrow what is read: a document whose key lies before the start cursor's (or
///   after the end cursor's) lies before (after) the cursor itself;
/// - **limits**, `limit(to:)` and `limit(toLast:)`, with or without filters: the store reads in
///   key order, a page at a time, until the documents read whose keys lie wholly before the last
///   one read hold `n` that pass the query exactly; no document unread can come before them.
///
/// The shared evaluator then decides every candidate exactly, ties included.
struct PostgresQueryOrder {
    /// The key's parts, SQL over `d.body` and `d.data`: a `bigint`, a `bigint` and a `bytea`,
    /// compared in the order's direction (``descending``).
    var keys: [String]
    var descending: Bool
    /// Conditions from the cursors over ``keys``: the documents that can pass them.
    var bounds: [String]
    var binds: [PostgresBind]
    var limit: CompiledQuery.Limit?

    /// A key's value, as PostgreSQL computes it.
    struct Key: Comparable {
        var rank: Int64
        var integerPart: Int64
        var bytes: [UInt8]

        static func < (a: Key, b: Key) -> Bool {
            if a.rank != b.rank { return a.rank < b.rank }
            if a.integerPart != b.integerPart { return a.integerPart < b.integerPart }
            return a.bytes.lexicographicallyPrecedes(b.bytes)
        }
    }

    /// Nil unless the query has orders on fields PostgreSQL can hold, and cursors or a limit.
    init?(_ compiled: CompiledQuery, firstPlaceholder first: Int) {
        guard let order = compiled.orders.first, order.field.segments.allSatisfy(PostgresQueryFilter.storable),
              compiled.limit != nil || compiled.start != nil || compiled.end != nil else { return nil }
        var binds: [PostgresBind] = [.textArray(order.field.segments)]
        let path = "$\(first)"
        let value = "d.body #> \(path)"
        keys = [
            "(CASE jsonb_typeof(\(value)) WHEN 'null' THEN 0 WHEN 'boolean' THEN 1 WHEN 'number' THEN 2 WHEN 'string' THEN 3 WHEN 'array' THEN 4 WHEN 'object' THEN 5 ELSE -1 END)::bigint",
            "(CASE WHEN jsonb_typeof(\(value)) = 'number' THEN \(PostgresQueryFilter.integerPartSQL(value)) ELSE 0 END)::bigint",
            "(CASE WHEN jsonb_typeof(\(value)) = 'string' THEN convert_to(d.data::jsonb #>> \(path), 'UTF8') ELSE ''::bytea END)",
        ]
        descending = order.descending
        var bounds: [String] = []
        // In the order's direction: a start cursor keeps what is on or after it, an end cursor
        // what is on or before it.
        for (cursor, isStart) in [(compiled.start, true), (compiled.end, false)] {
            guard let cursor, let bound = cursor.values.first, let key = Self.key(of: bound) else { continue }
            binds.append(.int(key.rank))
            binds.append(.int(key.integerPart))
            binds.append(.bytes(key.bytes))
            let comparison = isStart != descending ? ">=" : "<="
            bounds.append("ROW(\(keys.joined(separator: ", "))) \(comparison) ROW($\(first + binds.count - 3)::bigint, $\(first + binds.count - 2)::bigint, $\(first + binds.count - 1)::bytea)")
        }
        guard compiled.limit != nil || !bounds.isEmpty else { return nil }
        self.bounds = bounds
        self.binds = binds
        limit = compiled.limit
    }

    /// ``keys`` of a value, as PostgreSQL computes them of a stored one (nil for NaN, which JSON
    /// cannot hold).
    static func key(of value: JSONValue) -> Key? {
        var key = Key(rank: Int64(value.typeOrder), integerPart: 0, bytes: [])
        switch value {
        case .int, .double:
            guard let part = PostgresQueryFilter.integerPart(value) else { return nil }
            key.integerPart = part
        case .string(let string):
            key.bytes = Array(string.utf8)
        default:
            break
        }
        return key
    }
}
