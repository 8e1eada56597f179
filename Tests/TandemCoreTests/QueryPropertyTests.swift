import Testing
@testable import TandemCore

/// A small, seeded generator so every failure can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A deliberately naive evaluator, written separately from the real one: it spells out every rule
/// and sorts by insertion, so that agreement means the fast code is right.
enum Reference {
    static func rank(_ v: JSONValue) -> Int {
        switch v {
        case .null: 0
        case .bool: 1
        case .int, .double: 2
        case .string: 3
        case .array: 4
        case .object: 5
        }
    }

    /// -1, 0, 1. Generated numbers are small, so Double comparison is exact here.
    static func cmp(_ a: JSONValue, _ b: JSONValue) -> Int {
        if rank(a) != rank(b) { return rank(a) < rank(b) ? -1 : 1 }
        switch (a, b) {
        case (.bool(let x), .bool(let y)): return x == y ? 0 : (x ? 1 : -1)
        case (.string(let x), .string(let y)):
            let bx = Array(x.utf8), by = Array(y.utf8)
            return bx == by ? 0 : (bx.lexicographicallyPrecedes(by) ? -1 : 1)
        case (.array(let x), .array(let y)):
            var i = 0
            while i < x.count && i < y.count {
                let c = cmp(x[i], y[i])
                if c != 0 { return c }
                i += 1
            }
            return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
        case (.null, .null): return 0
        case (.object(let x), .object(let y)):
            let kx = x.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            let ky = y.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            var i = 0
            while i < kx.count && i < ky.count {
                let ck = cmp(.string(kx[i]), .string(ky[i]))
                if ck != 0 { return ck }
                let cv = cmp(x[kx[i]]!, y[ky[i]]!)
                if cv != 0 { return cv }
                i += 1
            }
            return kx.count == ky.count ? 0 : (kx.count < ky.count ? -1 : 1)
        default:
            let x = a.doubleValue!, y = b.doubleValue!
            return x == y ? 0 : (x < y ? -1 : 1)
        }
    }

    static func keyCmp(_ a: JSONValue?, _ b: JSONValue?) -> Int {
        switch (a, b) {
        case (nil, nil): return 0
        case (nil, _): return -1
        case (_, nil): return 1
        default: return cmp(a!, b!)
        }
    }

    static func get(_ d: Document, _ f: FieldPath) -> JSONValue? {
        var cur: JSONValue? = .object(d.data)
        for s in f.segments {
            guard case .object(let o)? = cur else { return nil }
            cur = o[s]
        }
        return cur
    }

    /// Whether a document passes one field filter.
    static func passes(_ d: Document, _ f: FieldPath, _ o: Query.FilterOperator, _ v: JSONValue) -> Bool {
        guard let x = get(d, f) else { return false }
        var pass: Bool
        switch o {
        case .equal: pass = cmp(x, v) == 0
        case .notEqual: pass = !x.isNull && cmp(x, v) != 0
        case .lessThan: pass = rank(x) == rank(v) && cmp(x, v) < 0
        case .lessThanOrEqual: pass = rank(x) == rank(v) && cmp(x, v) <= 0
        case .greaterThan: pass = rank(x) == rank(v) && cmp(x, v) > 0
        case .greaterThanOrEqual: pass = rank(x) == rank(v) && cmp(x, v) >= 0
        case .arrayContains:
            pass = false
            if case .array(let xs) = x { for e in xs where cmp(e, v) == 0 { pass = true } }
        case .arrayContainsAny:
            pass = false
            if case .array(let xs) = x, case .array(let vs) = v {
                for e in xs { for w in vs where cmp(e, w) == 0 { pass = true } }
            }
        case .in:
            pass = false
            for w in v.arrayValue! where cmp(x, w) == 0 { pass = true }
        case .notIn:
            pass = !x.isNull
            for w in v.arrayValue! where w.isNull || cmp(x, w) == 0 { pass = false }
        }
        return pass
    }

    /// Whether a document passes a filter: every one of an and's, one of an or's, spelled out.
    static func passes(_ d: Document, _ filter: Filter) -> Bool {
        switch filter {
        case .field(let f, let o, let v):
            return passes(d, f, o, v)
        case .and(let all):
            for x in all where !passes(d, x) { return false }
            return true
        case .or(let some):
            for x in some where passes(d, x) { return true }
            return false
        }
    }

    /// Whether the query is invalid by the composite filters' rules: an empty and or or anywhere,
    /// or more than 30 disjunctions once multiplied out (an or adds, an and multiplies).
    static func compositeInvalid(_ query: Query) -> Bool {
        func empty(_ filter: Filter) -> Bool {
            switch filter {
            case .field: return false
            case .and(let xs), .or(let xs): return xs.isEmpty || xs.contains(where: empty)
            }
        }
        func terms(_ filter: Filter) -> Int {
            switch filter {
            case .field: return 1
            case .and(let xs): return xs.reduce(1) { $0 * terms($1) }
            case .or(let xs): return xs.reduce(0) { $0 + terms($1) }
            }
        }
        var total = 1
        for op in query.operations {
            guard case .compositeFilter(let filter) = op else { continue }
            if empty(filter) { return true }
            total *= terms(filter)
        }
        return total > 30
    }

    static func evaluate(_ query: Query, _ docs: [Document]) -> [Document] {
        var filters: [Filter] = []
        var orders: [(FieldPath, Bool)] = []
        var startAt: ([JSONValue], Bool)? = nil
        var endAt: ([JSONValue], Bool)? = nil
        var first: Int? = nil
        var last: Int? = nil
        for op in query.operations {
            switch op {
            case .filter(let f, let o, let v): filters.append(.field(field: f, op: o, value: v))
            case .compositeFilter(let filter): filters.append(filter)
            case .order(let f, let d): orders.append((f, d))
            case .limit(let n): first = n; last = nil
            case .limitToLast(let n): last = n; first = nil
            case .cursor(.startAt, let v): startAt = (v, true)
            case .cursor(.startAfter, let v): startAt = (v, false)
            case .cursor(.endAt, let v): endAt = (v, true)
            case .cursor(.endBefore, let v): endAt = (v, false)
            }
        }
        var out: [Document] = []
        for d in docs {
            var ok = true
            for filter in filters where !passes(d, filter) {
                ok = false
                break
            }
            if ok { out.append(d) }
        }
        func orderCmp(_ a: Document, _ b: Document) -> Int {
            for (f, desc) in orders {
                var c = keyCmp(get(a, f), get(b, f))
                if desc { c = -c }
                if c != 0 { return c }
            }
            return a.path.description.split(separator: "/").map(String.init).lexicographicallyPrecedes(
                b.path.description.split(separator: "/").map(String.init), by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) ? -1 : 1
        }
        // Insertion sort.
        var sorted: [Document] = []
        for d in out {
            var i = sorted.count
            while i > 0 && orderCmp(sorted[i - 1], d) > 0 { i -= 1 }
            sorted.insert(d, at: i)
        }
        func cursorCmp(_ d: Document, _ values: [JSONValue]) -> Int {
            for (i, v) in values.enumerated() {
                var c = keyCmp(get(d, orders[i].0), v)
                if orders[i].1 { c = -c }
                if c != 0 { return c }
            }
            return 0
        }
        if let (v, inclusive) = startAt {
            sorted = sorted.filter { let c = cursorCmp($0, v); return c > 0 || (c == 0 && inclusive) }
        }
        if let (v, inclusive) = endAt {
            sorted = sorted.filter { let c = cursorCmp($0, v); return c < 0 || (c == 0 && inclusive) }
        }
        if let first { sorted = Array(sorted.prefix(first)) }
        if let last { sorted = Array(sorted.suffix(last)) }
        return sorted
    }
}

enum Generate {
    static func value(_ rng: inout SplitMix64) -> JSONValue {
        switch Int.random(in: 0..<9, using: &rng) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &rng))
        case 2, 3: return .int(Int.random(in: -3...3, using: &rng))
        case 4: return .double(Double(Int.random(in: -6...6, using: &rng)) / 2)
        case 5, 6: return .string(["", "a", "b", "B", "ab", "é"].randomElement(using: &rng)!)
        case 7: return .array((0..<Int.random(in: 0...2, using: &rng)).map { _ in .int(Int.random(in: 0...2, using: &rng)) })
        default: return .object(["k": .int(Int.random(in: 0...2, using: &rng))])
        }
    }

    static let fields: [FieldPath] = ["a", "b", "m.k", "tags"]

    static func document(_ index: Int, _ rng: inout SplitMix64) -> Document {
        var data: JSONObject = [:]
        for field in ["a", "b"] where Int.random(in: 0..<5, using: &rng) > 0 { data[field] = value(&rng) }
        if Bool.random(using: &rng) { data["m"] = Bool.random(using: &rng) ? ["k": value(&rng)] : value(&rng) }
        if Bool.random(using: &rng) {
            data["tags"] = .array((0..<Int.random(in: 0...3, using: &rng)).map { _ in .string(["x", "y", "z"].randomElement(using: &rng)!) })
        }
        let parent = ["p", "q"].randomElement(using: &rng)!
        return Document(path: try! DocumentPath("\(parent)/\(index)/items/d\(Int.random(in: 0..<1000, using: &rng))"), data: data)
    }

    /// A valid field filter on `field`.
    static func fieldFilter(_ field: FieldPath, _ rng: inout SplitMix64) -> Filter {
        var op = Query.FilterOperator.allCases.randomElement(using: &rng)!
        var operand = value(&rng)
        switch op {
        case .in, .notIn, .arrayContainsAny:
            operand = .array((0..<Int.random(in: 1...3, using: &rng)).map { _ in
                Bool.random(using: &rng) ? value(&rng) : .string(["x", "y"].randomElement(using: &rng)!)
            })
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            if operand.isNull { operand = 1 }
        case .arrayContains:
            if Bool.random(using: &rng) { operand = "x" }
        default:
            if Int.random(in: 0..<4, using: &rng) == 0 { op = .equal }
        }
        return Filter.whereField(field, op, operand)
    }

    /// An or or an and of one to three filters (rarely none, which a query refuses), each a field
    /// filter on any field or, while `depth` lasts, another or or and.
    static func composite(_ rng: inout SplitMix64, depth: Int) -> Filter {
        let count = Int.random(in: 0..<25, using: &rng) == 0 ? 0 : Int.random(in: 1...3, using: &rng)
        var members: [Filter] = []
        for _ in 0..<count {
            if depth > 1 && Int.random(in: 0..<3, using: &rng) == 0 {
                members.append(composite(&rng, depth: depth - 1))
            } else {
                members.append(fieldFilter(fields.randomElement(using: &rng)!, &rng))
            }
        }
        return Bool.random(using: &rng) ? Filter.orFilter(members) : Filter.andFilter(members)
    }

    static func query(_ rng: inout SplitMix64) -> Query {
        var query = Query()
        var orderCount = 0
        for _ in 0..<Int.random(in: 0...4, using: &rng) {
            let field = fields.randomElement(using: &rng)!
            switch Int.random(in: 0..<6, using: &rng) {
            case 0, 1:
                // Half the filters are ors and ands, nested up to two deep.
                if Bool.random(using: &rng) {
                    query = query.whereFilter(composite(&rng, depth: 2))
                } else {
                    query = query.whereFilter(fieldFilter(field, &rng))
                }
            case 2, 3:
                query = query.order(by: field, descending: Bool.random(using: &rng))
                orderCount += 1
            case 4:
                if orderCount > 0 {
                    let values = (0..<Int.random(in: 1...orderCount, using: &rng)).map { _ in value(&rng) }
                    let position = [Query.CursorPosition.startAt, .startAfter, .endAt, .endBefore].randomElement(using: &rng)!
                    query = query.cursor(position, values: values)
                }
            default:
                if orderCount > 0 && Bool.random(using: &rng) {
                    query = query.limit(toLast: Int.random(in: 0...8, using: &rng))
                } else {
                    query = query.limit(to: Int.random(in: 0...8, using: &rng))
                }
            }
        }
        return query
    }
}

@Suite("Query properties")
struct QueryPropertyTests {
    @Test("the evaluator agrees with a naive reference on seeded random documents and queries", arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func agreesWithReference(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        var nonEmpty = 0
        var nonEmptyWithComposite = 0
        for round in 0..<300 {
            let docs = (0..<Int.random(in: 0...40, using: &rng)).map { Generate.document($0, &rng) }
            let query = Generate.query(&rng)
            let invalid = Reference.compositeInvalid(query)
            let expected = Reference.evaluate(query, docs).map(\.path)
            let actual: [DocumentPath]
            do {
                actual = try query.evaluate(docs).map(\.path)
            } catch {
                if !invalid || error.code != .invalidArgument {
                    Issue.record("seed \(seed) round \(round): \(error) for \(query.operations)")
                }
                continue
            }
            if invalid {
                Issue.record("seed \(seed) round \(round): expected invalid-argument (an empty or/and, or over 30 disjunctions) for \(query.operations)")
                continue
            }
            if !expected.isEmpty {
                nonEmpty += 1
                if query.operations.contains(where: { if case .compositeFilter = $0 { return true } else { return false } }) { nonEmptyWithComposite += 1 }
            }
            #expect(actual == expected, "seed \(seed) round \(round): \(query.operations)")
        }
        // The generator must exercise non-trivial results, or the agreement proves little.
        #expect(nonEmpty > 100)
        #expect(nonEmptyWithComposite > 5, "ors and ands must be exercised too")
    }
}
