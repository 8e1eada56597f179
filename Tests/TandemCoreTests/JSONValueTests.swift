import Foundation
import Testing
@testable import TandemCore

@Suite("JSONValue")
struct JSONValueTests {
    @Test("types order null < bool < number < string < array < object")
    func typeOrder() {
        let ascending: [JSONValue] = [.null, false, true, -5, 2.5, 3, "", "a", [], [1], [:], ["a": 1]]
        for (i, lhs) in ascending.enumerated() {
            for (j, rhs) in ascending.enumerated() {
                let expected: JSONValue.Ordering = i == j ? .equal : (i < j ? .less : .greater)
                #expect(JSONValue.compare(lhs, rhs) == expected, "\(lhs) vs \(rhs)")
            }
        }
    }

    @Test("ints and doubles compare as numbers, exactly")
    func numbers() {
        #expect(JSONValue.compare(1, 1.0) == .equal)
        #expect(JSONValue.compare(1, 1.5) == .less)
        #expect(JSONValue.compare(2.5, 2) == .greater)
        #expect(JSONValue.compare(.int(Int.max), .double(9_223_372_036_854_775_807.0)) == .less)  // the double is 2^63
        #expect(JSONValue.compare(.double(.nan), .int(Int.min)) == .less)
        #expect(JSONValue.compare(.double(.nan), .double(.nan)) == .equal)
        #expect(JSONValue.compare(-1, -0.5) == .less)
        #expect(JSONValue.compare(-1, -1.5) == .greater)
    }

    @Test("strings compare by UTF-8 bytes; arrays and objects element-wise")
    func compound() {
        #expect(JSONValue.compare("Z", "a") == .less)
        #expect(JSONValue.compare("ab", "abc") == .less)
        #expect(JSONValue.compare([1, 2], [1, 3]) == .less)
        #expect(JSONValue.compare([1, 2], [1]) == .greater)
        #expect(JSONValue.compare(["a": 1], ["b": 0]) == .less)
        #expect(JSONValue.compare(["a": 2], ["a": 1, "b": 1]) == .greater)
    }

    @Test("strings that Swift calls equal but whose bytes differ (K and the Kelvin sign, é composed and not) are told apart, so the order is one total order whatever the input's order")
    func stringOrderIsTotal() {
        let kelvin: JSONValue = "\u{212A}", k: JSONValue = "K", e: JSONValue = "é", decomposed: JSONValue = "e\u{301}"
        #expect(JSONValue.compare(k, kelvin) == .less)
        #expect(!JSONValue.queryEquals(e, decomposed))
        // Transitive: K < é < Kelvin, and K < Kelvin.
        #expect(JSONValue.compare(k, e) == .less && JSONValue.compare(e, kelvin) == .less)
        let values = [kelvin, e, k, decomposed]
        let sorted = values.sorted { JSONValue.compare($0, $1) == .less }
        for permutation in [values.reversed(), [e, k, kelvin, decomposed], [decomposed, kelvin, k, e]] {
            #expect(permutation.sorted { JSONValue.compare($0, $1) == .less } == sorted)
        }
    }

    @Test("an object naming a key twice, as written or in two spellings Unicode counts as one, is refused rather than losing a value")
    func duplicateKeys() throws {
        for text in [#"{"a": 1, "a": 2}"#, "{\"caf\u{E9}\": 1, \"cafe\u{301}\": 2}", #"{"x": {"K": 1, "\#u{212A}": 2}}"#] {
            #expect(throws: TandemError.self, "\(text)") { _ = try JSONText.parse(text) }
            do {
                _ = try JSONText.parse(text)
            } catch {
                #expect(error.code == .invalidArgument && error.message.contains("named twice"))
            }
        }
        // The same key in different objects is no repetition.
        #expect(try JSONText.parse(#"{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]}"#)[field: "b"]?.arrayValue?.count == 2)
    }

    @Test("JSON text keeps ints and doubles apart and round-trips")
    func textRoundTrip() throws {
        let value = try JSONText.parse(#"{"i": 1, "d": 1.0, "e": 1e3, "s": "a\"b\\c\u00e9\ud83d\ude00", "n": null, "b": [true, false], "o": {"x": -0.5}}"#)
        #expect(value[field: "i"] == .int(1))
        #expect(value[field: "d"] == .double(1.0))
        #expect(value[field: "e"] == .double(1000))
        #expect(value[field: "s"] == .string("a\"b\\cé😀"))
        #expect(value[field: "o.x"] == .double(-0.5))
        let text = JSONText.encode(value)
        #expect(try JSONText.parse(text) == value)
        #expect(text.hasPrefix(#"{"b":[true,false],"d":1.0,"e":1000.0,"i":1,"#))
    }

    @Test("decimals read exactly as strtod reads them, short and long, signed and zero")
    func decimals() throws {
        var generator = SystemRandomNumberGenerator()
        var texts = ["0.0", "-0.0", "0.5", "-12.25", "1.000000000000001", "9007199254740993.5", "0.1", "0.3", "123456789012345.6",
                     "1234567890.12345", "99999999999999.99", "0.000000000000001", "3.14159265358979", "2.5e3", "-1.5E-7"]
        for _ in 0..<20_000 {
            let integerDigits = Int.random(in: 1...9, using: &generator)
            let fractionDigits = Int.random(in: 1...9, using: &generator)
            let integer = integerDigits == 1 ? String(Int.random(in: 0...9, using: &generator))
                : String(Int.random(in: 1...9, using: &generator)) + (1..<integerDigits).map { _ in String(Int.random(in: 0...9, using: &generator)) }.joined()
            let fraction = (0..<fractionDigits).map { _ in String(Int.random(in: 0...9, using: &generator)) }.joined()
            texts.append((Bool.random(using: &generator) ? "-" : "") + integer + "." + fraction)
        }
        for text in texts {
            guard case .double(let value) = try JSONText.parse(text) else {
                Issue.record("\(text) did not read as a double")
                continue
            }
            let expected = try #require(Double(text))
            #expect(value.bitPattern == expected.bitPattern, "\(text): \(value) != \(expected)")
        }
    }

    @Test("malformed JSON text is an invalid-argument error naming the offset", arguments: [
        "", "{", "[1,]", "{\"a\" 1}", "tru", "01", "1.", "\"abc", "{\"a\":1} x", "\"\\x\"", "\"\\ud800\"", "-",
    ])
    func malformed(text: String) {
        #expect(throws: TandemError.self) { try JSONText.parse(text) }
        do {
            _ = try JSONText.parse(text)
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains("Malformed JSON at byte"))
        }
    }

    @Test("numbers JSON text cannot hold exactly are refused, not rounded: integers past 64 bits, doubles past their range")
    func inexactNumbers() throws {
        for text in ["123456789012345678901234567890", "-9223372036854775809", "9223372036854775808", "1e999", "-1.5e400", #"{"n":1e999}"#] {
            do {
                _ = try JSONText.parse(text)
                Issue.record("\(text) was accepted")
            } catch {
                #expect(error.code == .invalidArgument && error.message.contains("Malformed JSON at byte"), "\(error)")
                #expect(error.message.contains("64 bits") || error.message.contains("range of a 64-bit double"), "\(error)")
            }
        }
        // The edges still read exactly, and a fraction or exponent is an explicit double.
        #expect(try JSONText.parse("9223372036854775807") == .int(.max))
        #expect(try JSONText.parse("-9223372036854775808") == .int(.min))
        #expect(try JSONText.parse("123456789012345678901234567890.0") == .double(1.2345678901234568e29))
        #expect(try JSONText.parse("1.7976931348623157e308") == .double(.greatestFiniteMagnitude))
        #expect(try JSONText.parse("1e-999") == .double(0))
        // A write built in Swift holding a non-finite double is refused before it is sent.
        let path = try DocumentPath("a/b")
        for mutation in [Mutation.set(path, ["x": .double(.infinity)]), .update(path, fields: ["y": ["z": .double(.nan)]]),
                         .set(path, [:], transforms: [.init("n", .increment(.double(-.infinity)))])] {
            #expect(throws: TandemError.self) { try mutation.validate() }
        }
    }

    @Test("nesting deeper than the limit is refused, not a crash")
    func deepNesting() {
        let text = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: TandemError.self) { try JSONText.parse(text) }
    }

    @Test("Codable round trip through Foundation's coders")
    func codable() throws {
        let value: JSONValue = ["a": [1, "x", nil, true, ["b": 2.5]]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == value)
    }

    @Test("dotted field paths read, set and remove nested fields")
    func fieldAccess() throws {
        var object: JSONObject = ["address": ["city": "London", "zip": "N1"], "name": "Ada"]
        #expect(object[field: "address.city"] == "London")
        #expect(object[field: "address.city.x"] == nil)
        #expect(object[field: "missing.city"] == nil)
        object.setValue("Paris", at: "address.city")
        object.setValue(1, at: "a.b.c")
        object.setValue(2, at: "name.first")  // replaces a non-map on the way
        #expect(object[field: "address.city"] == "Paris")
        #expect(object[field: "address.zip"] == "N1")
        #expect(object[field: "a.b.c"] == 1)
        #expect(object[field: "name.first"] == 2)
        #expect(object.removeValue(at: "address.zip") == "N1")
        #expect(object[field: "address"] == ["city": "Paris"])
    }

    @Test("backticks escape dots in keys")
    func escapedFieldPath() throws {
        let path = try FieldPath(dotted: "`a.b`.c")
        #expect(path.segments == ["a.b", "c"])
        #expect(path.description == "`a.b`.c")
        #expect(try FieldPath(dotted: path.description) == path)
        #expect(try FieldPath(dotted: #"`x\`y`"#).segments == ["x`y"])
        let object: JSONObject = ["a.b": ["c": 7], "a": ["b": ["c": 8]]]
        #expect(object[field: path] == 7)
        #expect(object[field: "a.b.c"] == 8)
    }

    @Test("invalid field paths say what is wrong", arguments: ["", ".a", "a.", "a..b", "`a"])
    func invalidFieldPath(text: String) {
        #expect(throws: TandemError.self) { try FieldPath(dotted: text) }
    }
}
