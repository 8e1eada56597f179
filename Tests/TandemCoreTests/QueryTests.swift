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

    @Test("matches tells whether one document passes the filters")
    func matches() throws {
        let query = Query().whereField("tags", arrayContains: "red").limit(to: 1)
        #expect(try query.matches(docs[0]))
        #expect(try !query.matches(docs[1]))
    }
}
