import Foundation
import Testing
@testable import TandemCore

@Suite("JSONValue encoder and decoder")
struct JSONValueCoderTests {
    struct Address: Codable, Equatable {
        var city: String
        var zip: String?
    }

    enum Role: String, Codable { case admin, guest }

    struct Profile: Codable, Equatable {
        var id: String
        var age: Int
        var ratio: Double
        var tags: [String]
        var address: Address
        var previous: [Address]
        var role: Role
        var joined: Date
        var avatar: Data
        var extra: JSONValue
        var nickname: String?
        var big: UInt64
    }

    let profile = Profile(
        id: "ada", age: 36, ratio: 1.0, tags: ["math"], address: Address(city: "London", zip: nil),
        previous: [Address(city: "Paris", zip: "75001")], role: .admin,
        joined: Date(timeIntervalSince1970: 1_700_000_000.25), avatar: Data([1, 2, 3]),
        extra: ["free": ["form", 2.0]], nickname: nil, big: .max
    )

    @Test("a model round-trips, keeping ints and doubles apart")
    func roundTrip() throws {
        let value = try JSONValueEncoder().encode(profile)
        #expect(value[field: "age"] == .int(36))
        #expect(value[field: "ratio"] == .double(1.0))
        #expect(value[field: "address.city"] == "London")
        #expect(value[field: "address.zip"] == nil, "encodeIfPresent leaves nil out")
        #expect(value[field: "role"] == "admin")
        #expect(value[field: "joined"] == "2023-11-14T22:13:20.250Z")
        #expect(value[field: "avatar"] == "AQID")
        #expect(value[field: "extra"] == ["free": ["form", 2.0]])
        #expect(value[field: "big"] == .double(Double(UInt64.max)))
        var decodable = profile
        decodable.big = 7
        let decoded = try JSONValueDecoder().decode(Profile.self, from: JSONValueEncoder().encode(decodable))
        #expect(decoded == decodable)
    }

    @Test("through JSON text the round trip is exact too")
    func throughText() throws {
        let value = try JSONValueEncoder().encode(["a": 1.0, "b": 2] as [String: Double])
        #expect(try JSONText.parse(JSONText.encode(value)) == value)
    }

    @Test("numbers convert where exact; mismatches name the coding path")
    func conversions() throws {
        struct Numbers: Codable { var i: Int; var d: Double; var small: Int8 }
        let numbers = try JSONValueDecoder().decode(Numbers.self, from: ["i": 3.0, "d": 3, "small": 5])
        #expect(numbers.i == 3 && numbers.d == 3 && numbers.small == 5)
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Numbers.self, from: ["i": 3.5, "d": 1, "small": 1]) }
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Numbers.self, from: ["i": 1, "d": 1, "small": 300]) }
        do {
            _ = try JSONValueDecoder().decode(Profile.self, from: ["id": 1])
            Issue.record("expected a type mismatch")
        } catch DecodingError.typeMismatch(_, let context) {
            #expect(context.codingPath.map(\.stringValue) == ["id"])
        }
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Address.self, from: ["zip": "1"]) }
    }

    @Test("arrays of primitives decode, and a bad element is named by its index")
    func primitiveArrays() throws {
        struct Lists: Codable, Equatable { var s: [String]; var i: [Int]; var d: [Double]; var b: [Bool]; var nested: [[Int]] }
        let lists = Lists(s: ["a", "é"], i: [1, -2], d: [0.5, 2], b: [true, false], nested: [[1], []])
        #expect(try JSONValueDecoder().decode(Lists.self, from: JSONValueEncoder().encode(lists)) == lists)
        #expect(try JSONValueDecoder().decode(Lists.self, from: ["s": [], "i": [3.0], "d": [1], "b": [], "nested": []]).i == [3])
        for (field, bad, path) in [("i", ["i": [1, "two"]], ["i", "Index 1"]), ("d", ["d": [true]], ["d", "Index 0"]), ("s", ["s": "x"], ["s"])] as [(String, JSONObject, [String])] {
            var body: JSONObject = ["s": [], "i": [], "d": [], "b": [], "nested": []]
            body[field] = bad[field]
            do {
                _ = try JSONValueDecoder().decode(Lists.self, from: body)
                Issue.record("expected a type mismatch for \(field)")
            } catch DecodingError.typeMismatch(_, let context) {
                #expect(context.codingPath.map { $0.intValue.map { "Index \($0)" } ?? $0.stringValue } == path)
            }
        }
    }

    @Test("a body must be an object")
    func objectOnly() {
        #expect(throws: TandemError.self) { try JSONValueEncoder().encodeObject([1, 2]) }
    }

    @Test("mutations round-trip with exact values")
    func mutations() throws {
        let mutation = Mutation.set(try DocumentPath("a/b"), ["x": 1.0, "y": 1], transforms: [.init("n", .increment(.double(2)))])
            .identified(by: MutationID(clientID: "c", sequence: 3))
        let decoded = try JSONValueDecoder().decode(Mutation.self, from: JSONText.parse(JSONText.encode(JSONValueEncoder().encode(mutation))))
        #expect(decoded == mutation)
        guard case .set(let data) = decoded.kind else { return }
        #expect(data["x"] == .double(1.0))
    }

    struct Tagged: Codable, Equatable {
        struct Inner: Codable, Equatable { var id: String? }
        var id: String
        var inner: Inner
    }

    @Test("a document's id fills a missing top-level id, and only that")
    func defaultID() throws {
        let decoder = JSONValueDecoder()
        #expect(try decoder.decode(Tagged.self, from: ["inner": [:]], defaultID: "doc") == Tagged(id: "doc", inner: .init(id: nil)))
        #expect(try decoder.decode(Tagged.self, from: ["id": "own", "inner": ["id": "x"]], defaultID: "doc") == Tagged(id: "own", inner: .init(id: "x")))
        #expect(throws: DecodingError.self) { try decoder.decode(Tagged.self, from: ["id": 3, "inner": [:]], defaultID: "doc") }
    }
}
