extension JSONValue {
    /// About how many bytes the value takes as compact JSON text, without writing it: exact for
    /// strings, booleans and null, an upper bound for numbers. For budgets, such as how many writes
    /// go in one message.
    package var estimatedEncodedBytes: Int {
        switch self {
        case .null: return 4
        case .bool(let bool): return bool ? 4 : 5
        case .int: return 20
        case .double: return 24
        case .string(let string): return Self.estimatedEncodedBytes(of: string)
        case .array(let elements): return elements.reduce(2 + max(0, elements.count - 1)) { $0 + $1.estimatedEncodedBytes }
        case .object(let object): return Self.estimatedEncodedBytes(of: object)
        }
    }

    /// As ``estimatedEncodedBytes``, for an object.
    package static func estimatedEncodedBytes(of object: JSONObject) -> Int {
        object.reduce(2 + max(0, object.count - 1)) { $0 + estimatedEncodedBytes(of: $1.key) + 1 + $1.value.estimatedEncodedBytes }
    }

    /// A string's bytes as JSON text: its UTF-8, quotes, and the escapes it needs.
    package static func estimatedEncodedBytes(of string: String) -> Int {
        var bytes = 2
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes += 2
            case 0..<0x20: bytes += 6
            default: bytes += 1
            }
        }
        return bytes
    }
}

extension Mutation {
    /// About how many bytes the mutation takes on the wire (see ``JSONValue/estimatedEncodedBytes``).
    package var estimatedWireBytes: Int {
        // The envelope: op, path, merge, precondition and id, with room to spare.
        var bytes = 160 + path.description.utf8.count
        switch kind {
        case .set(let data), .merge(let data, _): bytes += JSONValue.estimatedEncodedBytes(of: data)
        case .update(let values): bytes += values.reduce(0) { $0 + $1.field.description.utf8.count + 4 + $1.value.estimatedEncodedBytes }
        case .delete: break
        }
        if case .merge(_, let fields?) = kind { bytes += fields.reduce(0) { $0 + $1.description.utf8.count + 3 } }
        for transform in transforms { bytes += transform.field.description.utf8.count + 32 + transform.transform.wireValue.estimatedEncodedBytes }
        return bytes
    }
}
