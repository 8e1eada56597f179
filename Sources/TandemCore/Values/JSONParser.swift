/// A recursive-descent JSON parser over UTF-8 bytes. Every failure is an `invalid-argument` error that
/// names the offset, so a peer's bad message can be answered precisely.
struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0
    /// How deep arrays and objects may nest: never more than ``JSONText/maximumDepth``, so a deep
    /// text cannot exhaust the stack.
    let maximumDepth: Int

    init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int = JSONText.maximumDepth) {
        self.bytes = bytes
        self.maximumDepth = min(max(1, maximumDepth), JSONText.maximumDepth)
    }

    mutating func parseDocument() throws(TandemError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if index != bytes.count {
            throw fail("unexpected text after the JSON value")
        }
        return value
    }

    func fail(_ what: String) -> TandemError {
        TandemError.invalidArgument("Malformed JSON at byte \(index): \(what). Send one valid JSON value.")
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(TandemError) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character '\(Character(Unicode.Scalar(bytes[index])))'")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(TandemError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw fail("unexpected end of input") }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            throw fail("invalid literal")
        }
        index += count
    }

    private mutating func enter() throws(TandemError) {
        depth += 1
        if depth > maximumDepth {
            throw fail("nesting deeper than \(maximumDepth) levels")
        }
    }

    private mutating func parseObject() throws(TandemError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        var object = JSONObject()
        try readObject { (parser, key) throws(TandemError) in
            let start = parser.index
            // A key named twice would lose one of its values without a word; so would two
            // spellings Unicode counts as one (é precomposed and decomposed), which a Swift
            // dictionary keeps as one key.
            if object.updateValue(try parser.parseValue(), forKey: key) != nil {
                throw TandemError.invalidArgument("JSON at byte \(start): the key \"\(key.prefix(64))\" is named twice in one object (counting spellings Unicode treats as one, such as é precomposed and decomposed). An object holds one value per key: send each key once.")
            }
        }
        return .object(object)
    }

    private mutating func parseArray() throws(TandemError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        var array: [JSONValue] = []
        try readArray { (parser) throws(TandemError) in array.append(try parser.parseValue()) }
        return .array(array)
    }

    mutating func parseString() throws(TandemError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        var anyNonASCII: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                // ASCII needs no validation (nearly every key and most values).
                if anyNonASCII < 0x80 { return String(decoding: slice, as: UTF8.self) }
                guard let string = String(validating: slice, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw fail("unescaped control character in a string") }
            anyNonASCII |= byte
            index += 1
        }
        var utf8 = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: utf8, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): utf8.append(0x22)
                case UInt8(ascii: "\\"): utf8.append(0x5C)
                case UInt8(ascii: "/"): utf8.append(0x2F)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw fail("unpaired surrogate in a \\u escape")
                        }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid low surrogate in a \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("unpaired surrogate in a \\u escape")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
                    utf8.append(contentsOf: String(Character(unicode)).utf8)
                default:
                    throw fail("invalid escape sequence")
                }
            default:
                if byte < 0x20 { throw fail("unescaped control character in a string") }
                utf8.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    private mutating func parseHex4() throws(TandemError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("invalid hex digit in a \\u escape")
            }
            value = value * 16 + digit
            index += 1
        }
        return value
    }

    /// 10^0 through 10^15, each exact in a Double.
    private static let powersOfTen: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15]

    mutating func parseNumber() throws(TandemError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
            throw fail("expected a digit")
        }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        }
        let integerEnd = index
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
                throw fail("expected a digit after '.'")
            }
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        }
        var hasExponent = false
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            hasExponent = true
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
                throw fail("expected a digit in the exponent")
            }
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        }
        if isInteger && index - start <= 18 {
            // Fits an Int whatever the digits: read them without making a String.
            var value = 0
            var digit = bytes[start] == UInt8(ascii: "-") ? start + 1 : start
            while digit < index {
                value = value * 10 + Int(bytes[digit] &- UInt8(ascii: "0"))
                digit += 1
            }
            return .int(bytes[start] == UInt8(ascii: "-") ? -value : value)
        }
        if !isInteger && !hasExponent {
            // A decimal of at most 15 digits: its digits as an integer are exact in a Double, and so
            // is the power of ten, so one division rounds the value correctly, as strtod would.
            let negative = bytes[start] == UInt8(ascii: "-")
            let integerStart = negative ? start + 1 : start
            let fractionDigits = index - integerEnd - 1
            if (integerEnd - integerStart) + fractionDigits <= 15 {
                var mantissa = 0
                for position in integerStart..<index where position != integerEnd {
                    mantissa = mantissa * 10 + Int(bytes[position] &- UInt8(ascii: "0"))
                }
                let value = Double(mantissa) / Self.powersOfTen[fractionDigits]
                return .double(negative ? -value : value)
            }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger {
            // Never rounded into a double: a number that silently lost digits is a value nobody sent.
            guard let int = Int(text) else {
                throw fail("the integer \(text.count > 40 ? String(text.prefix(40)) + "…" : text) does not fit in 64 bits; send it as a string, or as a double written with a fraction or an exponent")
            }
            return .int(int)
        }
        guard let double = Double(text), double.isFinite else {
            throw fail("the number \(text.count > 40 ? String(text.prefix(40)) + "…" : text) is beyond the range of a 64-bit double")
        }
        return .double(double)
    }
}
