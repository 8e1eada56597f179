/// Typed access to the fields of a wire message, so every malformed message gets an
/// `invalid-argument` error naming the field and what was expected.
package struct WireObject: Sendable {
    package var fields: JSONObject
    /// What the object is, for messages: "the write message", "mutation 3".
    package var context: String

    package init(_ value: JSONValue, context: String) throws(TandemError) {
        guard case .object(let fields) = value else {
            throw TandemError.invalidArgument("Expected \(context) to be a JSON object, got \(value.typeName).")
        }
        self.fields = fields
        self.context = context
    }

    package init(fields: JSONObject, context: String) {
        self.fields = fields
        self.context = context
    }

    package func has(_ key: String) -> Bool {
        if let value = fields[key], !value.isNull { return true }
        return false
    }

    package func value(_ key: String) throws(TandemError) -> JSONValue {
        guard let value = fields[key] else {
            throw TandemError.invalidArgument("\(context.capitalizedFirst) is missing the field '\(key)'.")
        }
        return value
    }

    package func string(_ key: String) throws(TandemError) -> String {
        let value = try value(key)
        guard case .string(let string) = value else { throw wrongType(key, "a string", value) }
        return string
    }

    package func optionalString(_ key: String) throws(TandemError) -> String? {
        has(key) ? try string(key) : nil
    }

    package func optionalBool(_ key: String) throws(TandemError) -> Bool? {
        guard has(key) else { return nil }
        let value = try value(key)
        guard case .bool(let bool) = value else { throw wrongType(key, "true or false", value) }
        return bool
    }

    package func int(_ key: String) throws(TandemError) -> Int {
        let value = try value(key)
        guard case .int(let int) = value else { throw wrongType(key, "an integer", value) }
        return int
    }

    package func optionalInt(_ key: String) throws(TandemError) -> Int? {
        has(key) ? try int(key) : nil
    }

    package func version(_ key: String) throws(TandemError) -> Version {
        let int = try int(key)
        guard int >= 0 else { throw TandemError.invalidArgument("\(context.capitalizedFirst) has a negative '\(key)' (\(int)); versions start at 0.") }
        return Version(UInt64(int))
    }

    package func optionalVersion(_ key: String) throws(TandemError) -> Version? {
        has(key) ? try version(key) : nil
    }

    package func bool(_ key: String, default defaultValue: Bool) throws(TandemError) -> Bool {
        guard has(key) else { return defaultValue }
        let value = try value(key)
        guard case .bool(let bool) = value else { throw wrongType(key, "true or false", value) }
        return bool
    }

    package func object(_ key: String) throws(TandemError) -> JSONObject {
        let value = try value(key)
        guard case .object(let object) = value else { throw wrongType(key, "a JSON object", value) }
        return object
    }

    package func array(_ key: String) throws(TandemError) -> [JSONValue] {
        let value = try value(key)
        guard case .array(let array) = value else { throw wrongType(key, "an array", value) }
        return array
    }

    package func documentPath(_ key: String) throws(TandemError) -> DocumentPath {
        try DocumentPath(try string(key))
    }

    package func collectionPath(_ key: String) throws(TandemError) -> CollectionPath {
        try CollectionPath(try string(key))
    }

    package func wrongType(_ key: String, _ expected: String, _ value: JSONValue) -> TandemError {
        TandemError.invalidArgument("The field '\(key)' of \(context) must be \(expected), got \(value.typeName).")
    }
}

extension String {
    var capitalizedFirst: String {
        guard let first else { return self }
        return first.uppercased() + dropFirst()
    }
}
