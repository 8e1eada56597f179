/// Typed reading for messages whose shape is known: fields are read straight into their values,
/// without building a ``JSONValue`` object for each envelope first.
extension JSONParser {
    /// Reads an object, calling `field` with each key while positioned at its value, which `field`
    /// must consume.
    mutating func readObject(_ field: (inout JSONParser, String) throws(TandemError) -> Void) throws(TandemError) {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { throw fail("expected an object") }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':' after a key") }
            index += 1
            skipWhitespace()
            try field(&self, key)
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return
            } else {
                throw fail("expected ',' or '}' in an object")
            }
        }
    }

    /// Reads an array, calling `element` positioned at each element, which it must consume.
    mutating func readArray(_ element: (inout JSONParser) throws(TandemError) -> Void) throws(TandemError) {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "[") else { throw fail("expected an array") }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            try element(&self)
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            } else {
                throw fail("expected ',' or ']' in an array")
            }
        }
    }

    /// Consumes `null` if it is next; false (consuming nothing) otherwise.
    mutating func readNull() throws(TandemError) -> Bool {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "n") else { return false }
        try expectLiteral("null")
        return true
    }

    mutating func readString() throws(TandemError) -> String {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a string") }
        return try parseString()
    }

    mutating func readBool() throws(TandemError) -> Bool {
        guard case .bool(let bool) = try parseValue() else { throw fail("expected true or false") }
        return bool
    }

    mutating func readInt() throws(TandemError) -> Int {
        guard case .int(let int) = try parseValue() else { throw fail("expected an integer") }
        return int
    }

    /// Reads a string that holds no escapes as its raw UTF-8 bytes, passed to `body` (a timestamp).
    mutating func readPlainString<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) throws(TandemError) -> R {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a string") }
        let start = index + 1
        var end = start
        while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
            if bytes[end] == UInt8(ascii: "\\") || bytes[end] < 0x20 { throw fail("unexpected escape") }
            end += 1
        }
        guard end < bytes.count else { throw fail("unterminated string") }
        index = end + 1
        return body(UnsafeBufferPointer(rebasing: bytes[start..<end]))
    }
}

extension JSONParser {
    /// Passes over one value without building it: objects and arrays are walked, strings scanned
    /// to their closing quote (escapes included), numbers and literals read as usual.
    mutating func skipValue() throws(TandemError) {
        skipWhitespace()
        guard index < bytes.count else { throw fail("expected a value") }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            try readObject { (parser, _) throws(TandemError) in try parser.skipValue() }
        case UInt8(ascii: "["):
            try readArray { (parser) throws(TandemError) in try parser.skipValue() }
        case UInt8(ascii: "\""):
            index += 1
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\\"): index += 2
                case UInt8(ascii: "\""):
                    index += 1
                    return
                default: index += 1
                }
            }
            throw fail("unterminated string")
        default:
            _ = try parseValue()
        }
    }
}
