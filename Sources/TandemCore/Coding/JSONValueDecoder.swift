import Foundation

/// Decodes any `Decodable` straight from a ``JSONValue``: the inverse of ``JSONValueEncoder``.
///
/// Numbers convert where exact (an int field reads `3.0`; a double field reads `3`); dates read
/// ISO 8601 strings or seconds since 1970; a `JSONValue` field takes the raw value. A mismatch
/// throws a `DecodingError` naming the coding path.
///
/// ```swift
/// let user = try JSONValueDecoder().decode(User.self, from: .object(document.data))
/// ```
public struct JSONValueDecoder: Sendable {
    /// Creates a decoder; it has no options.
    public init() {}

    /// Decodes a value of the given type from a JSON value.
    ///
    /// Throws a `DecodingError` naming the coding path when the value does not fit the type.
    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try ValueDecoder(value: value, codingPath: []).decodeValue(T.self)
    }

    /// Decodes a value of the given type from a JSON object, such as a document's `data`.
    ///
    /// Throws a `DecodingError` naming the coding path when the object does not fit the type.
    public func decode<T: Decodable>(_ type: T.Type, from object: JSONObject) throws -> T {
        try decode(type, from: .object(object))
    }

    /// Decodes a document body whose `id` field, when absent, is `defaultID` (the document's id),
    /// without copying the body to add it.
    package func decode<T: Decodable>(_ type: T.Type, from object: JSONObject, defaultID: String) throws -> T {
        var decoder = ValueDecoder(value: .object(object), codingPath: [])
        decoder.defaultID = object["id"] == nil ? defaultID : nil
        return try decoder.decodeValue(T.self)
    }
}

struct ValueDecoder: Decoder {
    let value: JSONValue
    /// The path to the container holding this value, and this value's key in it. The full
    /// `codingPath` is built only when asked for (errors, nested containers), which saves an
    /// array allocation for every primitive field.
    let parentPath: [any CodingKey]
    let key: (any CodingKey)?
    /// The value of a missing top-level `id` key (a document's id); nil below the top level.
    var defaultID: String?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: JSONValue, codingPath: [any CodingKey]) {
        self.value = value
        self.parentPath = codingPath
        self.key = nil
    }

    init(value: JSONValue, parentPath: [any CodingKey], key: any CodingKey) {
        self.value = value
        self.parentPath = parentPath
        self.key = key
    }

    var codingPath: [any CodingKey] {
        guard let key else { return parentPath }
        return parentPath + [key]
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self { return value as! T }
        if T.self == Date.self { return try decodeDate() as! T }
        if T.self == Data.self {
            guard case .string(let text) = value, let data = Data(base64Encoded: text) else {
                throw mismatch(T.self, "a base64 string")
            }
            return data as! T
        }
        if T.self == URL.self {
            guard case .string(let text) = value, let url = URL(string: text) else { throw mismatch(T.self, "a URL string") }
            return url as! T
        }
        // Arrays of primitives, common in models, skip the generic unkeyed container (a boxed
        // container and runtime type lookups for every array).
        if T.self == [String].self { return unsafeBitCast(try array { try $0.string() }, to: T.self) }
        if T.self == [Int].self { return unsafeBitCast(try array { try $0.integer(Int.self) }, to: T.self) }
        if T.self == [Double].self { return unsafeBitCast(try array { try $0.double() }, to: T.self) }
        if T.self == [Bool].self { return unsafeBitCast(try array { try $0.bool() }, to: T.self) }
        return try T(from: self)
    }

    /// The elements of an array value, each read by `element` (errors name the element's index).
    private func array<Element>(_ element: (ValueDecoder) throws -> Element) throws -> [Element] {
        guard case .array(let values) = value else { throw mismatch([Element].self, "an array") }
        var elements: [Element] = []
        elements.reserveCapacity(values.count)
        let path = codingPath
        for (index, value) in values.enumerated() {
            elements.append(try element(ValueDecoder(value: value, parentPath: path, key: IndexKey(intValue: index))))
        }
        return elements
    }

    private func decodeDate() throws -> Date {
        switch value {
        case .string(let text):
            if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
            if let date = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return date }
            throw mismatch(Date.self, "an ISO 8601 date string")
        case .int, .double:
            return Date(timeIntervalSince1970: value.doubleValue!)
        default:
            throw mismatch(Date.self, "an ISO 8601 date string or seconds since 1970")
        }
    }

    func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
        DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "Expected \(expected), found \(value.typeName)."))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else { throw mismatch([String: JSONValue].self, "an object") }
        return KeyedDecodingContainer(KeyedValueDecoder<Key>(object: object, codingPath: codingPath, defaultID: defaultID))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let array) = value else { throw mismatch([JSONValue].self, "an array") }
        return UnkeyedValueDecoder(array: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleValueDecoder(decoder: self)
    }
}

/// Primitive reads shared by the three containers.
extension ValueDecoder {
    func bool() throws -> Bool {
        guard case .bool(let bool) = value else { throw mismatch(Bool.self, "a bool") }
        return bool
    }

    func string() throws -> String {
        guard case .string(let string) = value else { throw mismatch(String.self, "a string") }
        return string
    }

    func double() throws -> Double {
        guard let double = value.doubleValue else { throw mismatch(Double.self, "a number") }
        return double
    }

    func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        switch value {
        case .int(let int):
            if let exact = I(exactly: int) { return exact }
        case .double(let double):
            if let exact = I(exactly: double) { return exact }
        default:
            break
        }
        throw mismatch(I.self, "an integer that fits \(I.self)")
    }
}

struct KeyedValueDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: JSONObject
    let codingPath: [any CodingKey]
    /// What a missing `id` key reads as (see ``ValueDecoder/defaultID``).
    var defaultID: String? = nil

    var allKeys: [Key] {
        var keys = object.keys.compactMap { Key(stringValue: $0) }
        if defaultID != nil, let id = Key(stringValue: "id") { keys.append(id) }
        return keys
    }

    func contains(_ key: Key) -> Bool { value(key) != nil }

    private func value(_ key: any CodingKey) -> JSONValue? {
        if let value = object[key.stringValue] { return value }
        if let defaultID, key.stringValue == "id" { return .string(defaultID) }
        return nil
    }

    private func decoder(_ key: any CodingKey) throws -> ValueDecoder {
        guard let value = value(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "No value for key '\(key.stringValue)'."))
        }
        return ValueDecoder(value: value, parentPath: codingPath, key: key)
    }

    func decodeNil(forKey key: Key) throws -> Bool { (value(key) ?? .null).isNull }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder(key).bool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder(key).string() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder(key).double() }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try decoder(key).double()) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder(key).integer(Int.self) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decoder(key).integer(Int8.self) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decoder(key).integer(Int16.self) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decoder(key).integer(Int32.self) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decoder(key).integer(Int64.self) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decoder(key).integer(UInt.self) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decoder(key).integer(UInt8.self) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decoder(key).integer(UInt16.self) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decoder(key).integer(UInt32.self) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decoder(key).integer(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder(key).decodeValue(T.self) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: object["super"] ?? .null, codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

struct UnkeyedValueDecoder: UnkeyedDecodingContainer {
    let array: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(array: [JSONValue], codingPath: [any CodingKey]) {
        self.array = array
        self.codingPath = codingPath
    }

    var count: Int? { array.count }
    var isAtEnd: Bool { currentIndex >= array.count }

    private mutating func next() throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "The array has only \(array.count) elements."))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(value: array[currentIndex], parentPath: codingPath, key: IndexKey(intValue: currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, array[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next().bool() }
    mutating func decode(_ type: String.Type) throws -> String { try next().string() }
    mutating func decode(_ type: Double.Type) throws -> Double { try next().double() }
    mutating func decode(_ type: Float.Type) throws -> Float { Float(try next().double()) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next().integer(Int.self) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next().integer(Int8.self) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next().integer(Int16.self) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next().integer(Int32.self) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next().integer(Int64.self) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next().integer(UInt.self) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next().integer(UInt8.self) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next().integer(UInt16.self) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next().integer(UInt32.self) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next().integer(UInt64.self) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next().unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        try next()
    }
}

struct SingleValueDecoder: SingleValueDecodingContainer {
    let decoder: ValueDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value.isNull }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.bool() }
    func decode(_ type: String.Type) throws -> String { try decoder.string() }
    func decode(_ type: Double.Type) throws -> Double { try decoder.double() }
    func decode(_ type: Float.Type) throws -> Float { Float(try decoder.double()) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.integer(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.integer(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.integer(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(T.self) }
}
