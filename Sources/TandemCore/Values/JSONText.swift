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

    /// Parses JSON text from UTF-8 bytes.
    public static func parse<Bytes: Sequence>(bytes: Bytes) throws(TandemError) -> JSONValue where Bytes.Element == UInt8 {
        let array = Array(bytes)
        let result: Result<JSONValue, TandemError> = array.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer)
            do throws(TandemError) {
                return .success(try parser.parseDocument())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
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
        var output = ""
        write(value, to: &output)
        return output
    }

    /// Writes an object as compact JSON text with sorted keys.
    public static func encode(_ object: JSONObject) -> String {
        encode(.object(object))
    }

    static func write(_ value: JSONValue, to output: inout String) {
        switch value {
        case .null: output += "null"
        case .bool(let bool): output += bool ? "true" : "false"
        case .int(let int): output += String(int)
        case .double(let double):
            if double.isFinite {
                output += "\(double)"
            } else {
                output += "null"
            }
        case .string(let string): writeString(string, to: &output)
        case .array(let array):
            output += "["
            for (index, element) in array.enumerated() {
                if index > 0 { output += "," }
                write(element, to: &output)
            }
            output += "]"
        case .object(let object):
            output += "{"
            for (index, key) in object.keys.sorted(by: { JSONValue.compareStrings($0, $1) == .less }).enumerated() {
                if index > 0 { output += "," }
                writeString(key, to: &output)
                output += ":"
                write(object[key]!, to: &output)
            }
            output += "}"
        }
    }

    static func writeString(_ string: String, to output: inout String) {
        output += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    output.unicodeScalars.append(scalar)
                }
            }
        }
        output += "\""
    }
}
