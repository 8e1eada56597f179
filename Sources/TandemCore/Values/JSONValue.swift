/// A JSON value: the body of every document and the operand of every filter.
///
/// Integers and doubles are kept apart (an `increment` of an int stays an int), but compare as numbers.
/// Values have one total order, used by queries on the client and the server alike: by type first
/// (null < bool < number < string < array < object), then by value.
///
/// ```swift
/// let user: JSONValue = ["name": "Ada", "age": 36, "tags": ["math", "engines"]]
/// user[field: "name"]  // .string("Ada")
/// ```
public enum JSONValue: Sendable, Hashable {
    /// The JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer, kept apart from a double of the same value: `1`, not `1.0`.
    case int(Int)
    /// A floating-point number: `1.0`, not `1`.
    case double(Double)
    /// A string.
    case string(String)
    /// An array of values.
    case array([JSONValue])
    /// An object: keys to values.
    case object([String: JSONValue])
}

/// A document body: a JSON object.
public typealias JSONObject = [String: JSONValue]

extension JSONValue {
    /// The object's fields, or nil when this value is not an object.
    public var objectValue: JSONObject? {
        if case .object(let object) = self { return object }
        return nil
    }

    /// The array's elements, or nil when this value is not an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let array) = self { return array }
        return nil
    }

    /// The string, or nil when this value is not a string.
    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    /// The integer, or nil when this value is not an int.
    public var intValue: Int? {
        if case .int(let int) = self { return int }
        return nil
    }

    /// The number as a double, for ints and doubles alike.
    public var doubleValue: Double? {
        switch self {
        case .int(let int): return Double(int)
        case .double(let double): return double
        default: return nil
        }
    }

    /// The bool, or nil when this value is not a bool.
    public var boolValue: Bool? {
        if case .bool(let bool) = self { return bool }
        return nil
    }

    /// Whether this is `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Whether this is an int or a double.
    public var isNumber: Bool {
        switch self {
        case .int, .double: return true
        default: return false
        }
    }

    /// The name of this value's type, as error messages say it.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "bool"
        case .int: return "int"
        case .double: return "double"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue: CustomStringConvertible {
    /// Compact JSON text with sorted keys.
    public var description: String { JSONText.encode(self) }
}
