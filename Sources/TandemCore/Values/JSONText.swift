/// Reads and writes JSON text for ``JSONValue`` exactly: `1` stays an int and `1.0` a double, which a
/// generic JSON decoder cannot promise.
///
/// ```swift
/// let value = try JSONText.parse(#"{"count": 1, "ratio": 1.0}"#)
/// JSONText.encode(value)  // {"count":1,"ratio":1.0}
/// ```
public enum JSONText {
    /// How deep arrays and objects may nest before parsing stops with `invalid-argument`.
    public static let maximumDepth = 256

    /// Parses JSON text. Malformed text throws ``TandemError`` `invalid-argument` naming the byte offset.
    public static func parse(_ text: String) throws(TandemError) -> JSONValue {
        var text = text
        let result: Result<JSONValue, TandemError> = text.withUTF8 { bytes in
            var parser = JSONParser(bytes: bytes)
            do throws(TandemError) {
                return .success(try parser.parseDocument())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Parses JSON text from UTF-8 bytes, nesting at most `maximumDepth` levels (and never more
    /// than ``maximumDepth``).
    public static func parse<Bytes: Sequence>(bytes: Bytes, maximumDepth: Int = JSONText.maximumDepth) throws(TandemError) -> JSONValue where Bytes.Element == UInt8 {
        let array = Array(bytes)
        let result: Result<JSONValue, TandemError> = array.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer, maximumDepth: maximumDepth)
            do throws(TandemError) {
                return .success(try parser.parseDocument())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Parses JSON text from UTF-8 bytes where they lie.
    package static func parse(utf8 bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int = JSONText.maximumDepth) throws(TandemError) -> JSONValue {
        var parser = JSONParser(bytes: bytes, maximumDepth: maximumDepth)
        return try parser.parseDocument()
    }

    /// Parses JSON text that must be an object, as a document body is.
    public static func parseObject(_ text: String) throws(TandemError) -> JSONObject {
        let value = try parse(text)
        guard case .object(let object) = value else {
            throw TandemError.invalidArgument("Expected a JSON object for a document body, got \(value.typeName). Wrap the fields in {…}.")
        }
        return object
    }

    /// Writes compact JSON text with keys sorted, so equal values give equal text.
    /// NaN and infinities, which JSON cannot hold, are written as `null`.
    public static func encode(_ value: JSONValue) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(128)
        write(value, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Writes an object as compact JSON text with sorted keys.
    public static func encode(_ object: JSONObject) -> String {
        encode(.object(object))
    }

    // Written as UTF-8 bytes and made a String once: appending to a String scalar by scalar was the
    // server's hottest path.
    static func write(_ value: JSONValue, to output: inout [UInt8]) {
        switch value {
        case .null: append("null", to: &output)
        case .bool(let bool): append(bool ? "true" : "false", to: &output)
        case .int(let int): writeInt(int, to: &output)
        case .double(let double):
            append(double.isFinite ? double.description : "null", to: &output)
        case .string(let string): writeString(string, to: &output)
        case .array(let array):
            output.append(UInt8(ascii: "["))
            var first = true
            for element in array {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                write(element, to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            var first = true
            for key in object.keys.sorted(by: { JSONValue.compareStrings($0, $1) == .less }) {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                write(object[key]!, to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// Appends an integer's decimal digits without making a String.
    static func writeInt(_ value: Int, to output: inout [UInt8]) {
        if value < 0 { output.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        if magnitude < 10 {
            output.append(UInt8(truncatingIfNeeded: 48 + magnitude))
            return
        }
        let start = output.count
        while magnitude > 0 {
            output.append(UInt8(truncatingIfNeeded: 48 + magnitude % 10))
            magnitude /= 10
        }
        output[start...].reverse()
    }

    private static func append(_ text: String, to output: inout [UInt8]) {
        var text = text
        text.withUTF8 { output.append(contentsOf: $0) }
    }

    static func writeString(_ string: String, to output: inout [UInt8]) {
        var string = string
        string.withUTF8 { writeString(utf8: $0, to: &output) }
    }

    /// Writes UTF-8 bytes as a JSON string, escaping what JSON requires.
    static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        do {
            var runStart = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                runStart = index + 1
                switch byte {
                case UInt8(ascii: "\""): append("\\\"", to: &output)
                case UInt8(ascii: "\\"): append("\\\\", to: &output)
                case UInt8(ascii: "\n"): append("\\n", to: &output)
                case UInt8(ascii: "\r"): append("\\r", to: &output)
                case UInt8(ascii: "\t"): append("\\t", to: &output)
                case 0x08: append("\\b", to: &output)
                case 0x0C: append("\\f", to: &output)
                default:
                    let hex = String(byte, radix: 16)
                    append("\\u" + String(repeating: "0", count: 4 - hex.count) + hex, to: &output)
                }
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count]))
        }
        output.append(UInt8(ascii: "\""))
    }
}
