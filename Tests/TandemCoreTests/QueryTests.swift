import Foundation
import Testing
@testable import TandemCore

func doc(_ id: String, _ data: JSONObject) -> Document {
    Document(path: try! DocumentPath("items/\(id)"), data: data)
}

@Suite("Query")
struct QueryTests {
    let docs = [
        doc("a", ["n": 1, "s": "x", "tags": ["red", "blue"], "m": ["k": 1]]),
        doc("b", ["n": 2.5, "s": "y", "tags": ["green"]]),
        doc("c", ["n": 2, "s": nil, "tags": []]),
        doc("d", ["n": "text", "s": "x"]),
        doc("e", ["s": "z", "m": ["k": 3]]),
        doc("f", ["n": nil, "tags": ["red"], "m": ["k": 2]]),
    ]

    func ids(_ query: Query) throws -> [String] {
        try query.evaluate(docs).map(\.path.id)
    }

    @Test("where(…) is whereField(…) under the other libraries' spelling, every filter")
    func whereSpelling() throws {
        let pairs: [(Query, Query)] = [
            (Query().where("s", isEqualTo: "x"), Query().whereField("s", isEqualTo: "x")),
            (Query().where("s", isNotEqualTo: "x"), Query().whereField("s", isNotEqualTo: "x")),
            (Query().where("n", isLessThan: 2), Query().whereField("n", isLessThan: 2)),
            (Query().where("n", isLessThanOrEqualTo: 2), Query().whereField("n", isLessThanOrEqualTo: 2)),
            (Query().where("n", isGreaterThan: 1), Query().whereField("n", isGreaterThan: 1)),
            (Query().where("n", isGreaterThanOrEqualTo: 2), Query().whereField("n", isGreaterThanOrEqualTo: 2)),
            (Query().where("tags", arrayContains: "red"), Query().whereField("tags", arrayContains: "red")),
            (Query().where("tags", arrayContainsAny: ["red", "green"]), Query().whereField("tags", arrayContainsAny: ["red", "green"])),
            (Query().where("s", in: ["x", "y"]), Query().whereField("s", in: ["x", "y"])),
            (Query().where("s", notIn: ["x"]), Query().whereField("s", notIn: ["x"])),
            (Query().where("n", .greaterThan, 1), Query().whereField("n", .greaterThan, 1)),
        ]
        for (spelled, reference) in pairs {
            #expect(spelled == reference)
            #expect(try ids(spelled) == ids(reference))
        }
        #expect(try ids(Query().where("s", isEqualTo: "x").where("n", isLessThan: 2)) == ["a"])
    }

    @Test("operations are kept in chain order; equality is order-sensitive")
    func equality() throws {
        let a = Query().whereField("n", isEqualTo: 1).order(by: "s")
        let b = Query().order(by: "s").whereField("n", isEqualTo: 1)
        #expect(a != b)
        #expect(a == Query().whereField("n", isEqualTo: 1).order(by: "s"))
        #expect(a.operations.count == 2)
        let decoded = try JSONDecoder().decode(Query.self, from: JSONEncoder().encode(a))
        #expect(decoded == a)
    }

    @Test("an empty query orders by path")
    func empty() throws {
        #expect(try ids(Query()) == ["a", "b", "c", "d", "e", "f"])
    }

    @Test("equality and comparisons match numbers across int and double, and only their own type")
    func comparisons() throws {
        #expect(try ids(Query().whereField("n", isEqualTo: 2.0)) == ["c"])
        #expect(try ids(Query().whereField("n", isGreaterThan: 1)) == ["b", "c"])
        #expect(try ids(Query().whereField("n", isLessThanOrEqualTo: 2)) == ["a", "c"])
        #expect(try ids(Query().whereField("n", isGreaterThan: "a")) == ["d"])
        #expect(try ids(Query().whereField("s", isEqualTo: nil)) == ["c"])
        #expect(try ids(Query().whereField("m.k", isGreaterThanOrEqualTo: 2)) == ["e", "f"])
    }

    @Test("a missing field never matches; != and not-in also skip null")
    func missingFields() throws {
        #expect(try ids(Query().whereField("n", isNotEqualTo: 1)) == ["b", "c", "d"])
        #expect(try ids(Query().whereField("s", notIn: ["x"])) == ["b", "e"])
        #expect(try ids(Query().whereField("s", notIn: ["x", nil])) == [])
        #expect(try ids(Query().whereField("s", in: ["x", "z"])) == ["a", "d", "e"])
    }

    @Test("array-contains and array-contains-any")
    func arrays() throws {
        #expect(try ids(Query().whereField("tags", arrayContains: "red")) == ["a", "f"])
        #expect(try ids(Query().whereField("tags", arrayContainsAny: ["green", "blue"])) == ["a", "b"])
    }

    @Test("orders: missing first, ties by path, descending reverses")
    func ordering() throws {
        #expect(try ids(Query().order(by: "n")) == ["e", "f", "a", "c", "b", "d"])
        #expect(try ids(Query().order(by: "n", descending: true)) == ["d", "b", "c", "a", "f", "e"])
        #expect(try ids(Query().order(by: "s").order(by: "n", descending: true)) == ["f", "c", "d", "a", "b", "e"])
    }

    @Test("limits: last one set wins; limit(toLast:) keeps query order")
    func limits() throws {
        #expect(try ids(Query().order(by: "n").limit(to: 2)) == ["e", "f"])
        #expect(try ids(Query().order(by: "n").limit(toLast: 2)) == ["b", "d"])
        #expect(try ids(Query().order(by: "n").limit(to: 1).limit(toLast: 3)) == ["c", "b", "d"])
        #expect(try ids(Query().order(by: "n").limit(toLast: 3).limit(to: 1)) == ["e"])
        #expect(try ids(Query().limit(to: 0)) == [])
    }

    @Test("cursors bound the ordered results, one value per order")
    func cursors() throws {
        let byN = Query().whereField("n", isGreaterThanOrEqualTo: 0).order(by: "n")
        #expect(try ids(byN) == ["a", "c", "b"])
        #expect(try ids(byN.start(at: 2)) == ["c", "b"])
        #expect(try ids(byN.start(after: 2)) == ["b"])
        #expect(try ids(byN.end(at: 2)) == ["a", "c"])
        #expect(try ids(byN.end(before: 2)) == ["a"])
        #expect(try ids(byN.start(at: 1).end(before: 2.5)) == ["a", "c"])
        let twoOrders = Query().order(by: "s").order(by: "n", descending: true)
        #expect(try ids(twoOrders.start(after: "x", "text")) == ["a", "b", "e"])
        #expect(try ids(twoOrders.start(at: "y")) == ["b", "e"])
    }

    @Test("invalid queries throw invalid-argument", arguments: [
        Query().whereField("n", in: []),
        Query().whereField("n", .in, 3),
        Query().whereField("n", .notIn, "x"),
        Query().whereField("n", .arrayContainsAny, 1),
        Query().limit(toLast: 2),
        Query().order(by: "n").start(at: 1, 2),
        Query().start(at: 1),
        Query().limit(to: -1),
        Query().whereField("n", isLessThan: nil),
        Query().whereField("n", isGreaterThan: .double(.nan)),
        Query().whereField("a..b", isEqualTo: 1),
    ])
    func invalid(query: Query) {
        do {
            _ = try query.evaluate(docs)
            Issue.record("expected invalid-argument")
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test("an or keeps a document that passes any of its filters; each filter skips documents without its field, as alone")
    func orFilters() throws {
        let either = Filter.orFilter([Filter.whereField("s", isEqualTo: "y"), Filter.whereField("m.k", isGreaterThanOrEqualTo: 2)])
        #expect(try ids(Query().whereFilter(either)) == ["b", "e", "f"])
        // != skips f (n is null) and e (no n), but e passes the other branch.
        #expect(try ids(Query().whereFilter(Filter.orFilter([Filter.whereField("n", isNotEqualTo: 1), Filter.whereField("s", isEqualTo: "z")]))) == ["b", "c", "d", "e"])
        // An or of equalities on one field is an in.
        let orOfEqualities = Query().whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("s", isEqualTo: "z")]))
        #expect(try ids(orOfEqualities) == ids(Query().whereField("s", in: ["x", "z"])))
        #expect(try ids(orOfEqualities) == ["a", "d", "e"])
        // Nested: an and inside an or, and an or beside the query's other filters (a conjunction).
        let nested = Filter.orFilter([
            Filter.andFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("n", isLessThan: 2)]),
            Filter.whereField("tags", arrayContains: "green"),
        ])
        #expect(try ids(Query().whereFilter(nested)) == ["a", "b"])
        let beside = Query().whereField("s", isEqualTo: "x").whereFilter(Filter.orFilter([Filter.whereField("n", isEqualTo: 1), Filter.whereField("n", isEqualTo: "text")]))
        #expect(try ids(beside) == ["a", "d"])
        #expect(try ids(Query().whereFilter(Filter.orFilter([Filter.whereField("n", isEqualTo: 1), Filter.whereField("n", isEqualTo: "text")])).whereField("s", isEqualTo: "y")) == [])
        // Orders, limits and cursors apply to what the or keeps.
        let ordered = Query().whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("s", isEqualTo: "y")])).order(by: "n", descending: true)
        #expect(try ids(ordered) == ["d", "b", "a"])
        #expect(try ids(ordered.limit(to: 2)) == ["d", "b"])
        #expect(try ids(ordered.start(after: 2.5)) == ["a"])
        #expect(try Query().whereFilter(either).matches(docs[5]))
        #expect(try !Query().whereFilter(either).matches(docs[0]))
    }

    @Test("an and is the filters chained; whereFilter of one field filter is whereField")
    func andFilters() throws {
        let both = Query().whereFilter(Filter.andFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("n", isEqualTo: 1)]))
        #expect(try ids(both) == ids(Query().whereField("s", isEqualTo: "x").whereField("n", isEqualTo: 1)))
        #expect(try ids(both) == ["a"])
        #expect(Query().whereFilter(Filter.whereField("s", isEqualTo: "x")) == Query().whereField("s", isEqualTo: "x"))
        #expect(Query().whereFilter(Filter.whereField("tags", arrayContainsAny: ["red"])) == Query().whereField("tags", arrayContainsAny: ["red"]))
        // One filter alone in an or or an and is that filter.
        #expect(try ids(Query().whereFilter(Filter.orFilter([Filter.andFilter([Filter.whereField("tags", arrayContains: "red")])]))) == ["a", "f"])
        // Composite filters keep their place in the chain, and survive Codable.
        let chained = Query().order(by: "n").whereFilter(Filter.orFilter([Filter.whereField("n", isEqualTo: 1), Filter.whereField("s", isEqualTo: "z")]))
        #expect(chained.operations.count == 2)
        if case .order = chained.operations[0], case .compositeFilter = chained.operations[1] {} else {
            Issue.record("operations out of chain order: \(chained.operations)")
        }
        #expect(try JSONDecoder().decode(Query.self, from: JSONEncoder().encode(chained)) == chained)
    }

    @Test("composite filters are refused when empty, when a filter inside is invalid, or past 30 disjunctions", arguments: [
        Query().whereFilter(Filter.orFilter([])),
        Query().whereFilter(Filter.andFilter([])),
        Query().whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.andFilter([])])),
        Query().whereFilter(Filter.orFilter([Filter.whereField("n", in: []), Filter.whereField("s", isEqualTo: "x")])),
        Query().whereFilter(Filter.orFilter([Filter.whereField("n", isLessThan: nil), Filter.whereField("s", isEqualTo: "x")])),
        Query().whereFilter(Filter.orFilter([Filter.whereField("a..b", isEqualTo: 1), Filter.whereField("s", isEqualTo: "x")])),
        Query().whereFilter(Filter.orFilter((0..<31).map { Filter.whereField("n", isEqualTo: .int($0)) })),
        // 6 × 6 once multiplied out.
        Query().whereFilter(Filter.andFilter([
            Filter.orFilter((0..<6).map { Filter.whereField("n", isEqualTo: .int($0)) }),
            Filter.orFilter((0..<6).map { Filter.whereField("s", isEqualTo: .int($0)) }),
        ])),
        Query().whereFilter(Filter.orFilter((0..<6).map { Filter.whereField("n", isEqualTo: .int($0)) }))
            .whereFilter(Filter.orFilter((0..<6).map { Filter.whereField("s", isEqualTo: .int($0)) })),
    ])
    func invalidComposite(query: Query) {
        do {
            _ = try query.evaluate(docs)
            Issue.record("expected invalid-argument")
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test("up to 30 disjunctions are allowed, and the refusal past them says the limit")
    func disjunctionLimit() throws {
        let thirty = Query().whereFilter(Filter.orFilter((0..<30).map { Filter.whereField("n", isEqualTo: .int($0)) }))
        #expect(try ids(thirty) == ["a", "c"])
        let fiveBySix = Query().whereFilter(Filter.orFilter((0..<5).map { Filter.whereField("n", isEqualTo: .int($0)) }))
            .whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("s", isEqualTo: nil), Filter.whereField("s", isEqualTo: "q"),
                                          Filter.whereField("s", isEqualTo: "r"), Filter.whereField("s", isEqualTo: "t"), Filter.whereField("s", isEqualTo: "u")]))
        #expect(try ids(fiveBySix) == ["a", "c"])
        // in counts as one filter, however many values it has.
        #expect(try ids(Query().whereField("n", in: (0..<100).map { JSONValue.int($0) }).whereFilter(thirtyFilter)) == ["a", "c"])
        do {
            _ = try CompiledQuery(thirty.whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("s", isEqualTo: nil)])))
            Issue.record("expected invalid-argument")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains("30"), "\(error.message)")
        }
    }

    private var thirtyFilter: Filter { Filter.orFilter((0..<30).map { Filter.whereField("n", isEqualTo: .int($0)) }) }

    @Test("composite filters on the wire: {\"or\": [...]} and {\"and\": [...]} of filter objects, round trip, the old form unchanged")
    func wire() throws {
        let query = Query()
            .whereField("s", isEqualTo: "x")
            .whereFilter(Filter.orFilter([
                Filter.whereField("n", isLessThan: 2),
                Filter.andFilter([Filter.whereField("tags", arrayContains: "red"), Filter.whereField("m.k", in: [2, 3])]),
            ]))
            .order(by: "n")
            .limit(to: 5)
        let expected: JSONValue = [
            ["where": "s", "op": "==", "value": "x"],
            ["or": [
                ["where": "n", "op": "<", "value": 2],
                ["and": [["where": "tags", "op": "array-contains", "value": "red"], ["where": "m.k", "op": "in", "value": [2, 3]]]],
            ]],
            ["orderBy": "n", "descending": false],
            ["limit": 5],
        ]
        #expect(query.wireValue == expected)
        #expect(try Query(wire: query.wireValue) == query)
        #expect(try Query(wire: try JSONText.parse(JSONText.encode(query.wireValue))) == query)
        // A field filter read from inside an or is the same filter whereField makes.
        let read = try Query(wire: try JSONText.parse(#"[{"or": [{"where": "s", "op": "==", "value": "x"}, {"where": "n", "op": "==", "value": 1}]}]"#))
        #expect(read == Query().whereFilter(Filter.orFilter([Filter.whereField("s", isEqualTo: "x"), Filter.whereField("n", isEqualTo: 1)])))
        #expect(try ids(read) == ["a", "d"])
    }

    @Test("malformed composite filters on the wire are invalid-argument and say where", arguments: [
        (#"[{"or": []}]"#, "The or in query operation 1 has no filters"),
        (#"[{"and": 3}]"#, "must be an array"),
        (#"[{"or": [{"where": "a", "op": "==", "value": 1}], "limit": 1}]"#, "names or and limit"),
        (#"[{"or": [{"orderBy": "a"}]}]"#, "Filter 1 of the or in query operation 1 names orderBy, which is not a filter"),
        (#"[{"or": [{"x": 1}]}]"#, "is not a filter"),
        (#"[{"or": [{"where": "a", "or": []}]}]"#, "names where and or"),
        (#"[{"or": [{"where": "a", "op": "~", "value": 1}]}]"#, "Unknown filter operator '~' in filter 1 of the or in query operation 1"),
        (#"[{"and": [{"where": "a", "op": "==", "value": 1}, {"or": [{"where": "b", "op": "=="}]}]}]"#, "Filter 1 of the or in filter 2 of the and in query operation 1 is missing the field 'value'"),
        (#"[{"or": [{"where": "a", "op": "in", "value": []}]}]"#, "needs at least one value"),
    ])
    func malformedWire(text: String, fragment: String) throws {
        do {
            _ = try Query(wire: try JSONText.parse(text))
            Issue.record("expected an error for \(text)")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains(fragment), "\(error.message)")
        }
    }

    @Test("matches tells whether one document passes the filters")
    func matches() throws {
        let query = Query().whereField("tags", arrayContains: "red").limit(to: 1)
        #expect(try query.matches(docs[0]))
        #expect(try !query.matches(docs[1]))
    }
}
