import TandemCore

/// What of a query's filters PostgreSQL can apply to `body` (the documents' `jsonb`) while it
/// reads, so a query reads its candidates instead of its whole collection.
///
/// Each condition is a **superset** of the filter it comes from: it never leaves out a document the
/// filter keeps, and the shared evaluator then decides every candidate exactly (types, missing
/// fields, numbers compared exactly across int and double). So only filters whose matches
/// containment (`@>`, which a GIN index serves) can find without loss are translated: `==`, `in`,
/// `array-contains` and `array-contains-any` with values that are strings (without NUL), booleans, null, or
/// numbers whose JSON text PostgreSQL compares exactly (integers of magnitude below 2^53, whose
/// double forms are written as those integers). Bodies and values are compared in Unicode's NFC
/// form, so strings and keys match by canonical equivalence, as Swift's do. A document whose body
/// PostgreSQL could not store as `jsonb` is always a candidate.
struct PostgresQueryFilter {
    /// The SQL condition over `d.body`, with `$n` placeholders numbered from the `first` given.
    var sql: String
    /// The JSON texts the placeholders stand for, in order.
    var values: [String]

    /// The condition for `query`'s filters, or nil when none can be translated.
    init?(_ query: Query, firstPlaceholder first: Int) {
        var conditions: [String] = []
        var values: [String] = []
        func placeholder(_ value: JSONValue) -> String {
            values.append(JSONText.encode(value))
            // Compared as the bodies are stored: normalized (NFC), so text compares as Swift's
            // strings do, by canonical equivalence.
            return "normalize($\(first + values.count - 1), NFC)::jsonb"
        }
        for case .filter(let field, let op, let value) in query.operations where field.segments.allSatisfy(Self.storable) {
            switch op {
            case .equal:
                guard Self.containable(value) else { continue }
                conditions.append("d.body @> \(placeholder(Self.nest(value, at: field)))")
            case .arrayContains:
                guard Self.containable(value) else { continue }
                conditions.append("d.body @> \(placeholder(Self.nest(.array([value]), at: field)))")
            case .in, .arrayContainsAny:
                guard case .array(let wanted) = value, !wanted.isEmpty, wanted.count <= 100, wanted.allSatisfy(Self.containable) else { continue }
                let alternatives = wanted.map { element in
                    "d.body @> \(placeholder(Self.nest(op == .in ? element : .array([element]), at: field)))"
                }
                conditions.append("(" + alternatives.joined(separator: " OR ") + ")")
            case .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual, .notIn:
                continue
            }
        }
        guard !conditions.isEmpty else { return nil }
        sql = "(d.body IS NULL OR (" + conditions.joined(separator: " AND ") + "))"
        self.values = values
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

    /// Whether jsonb can hold the text: not with a NUL character (nor, so, the documents that do).
    static func storable(_ text: String) -> Bool {
        !text.unicodeScalars.contains("\u{0000}")
    }

    /// `{"a": {"b": value}}` for the field `a.b`.
    static func nest(_ value: JSONValue, at field: FieldPath) -> JSONValue {
        field.segments.reversed().reduce(value) { inner, key in .object([key: inner]) }
    }
}
