import Foundation

/// Encodes any `Encodable` straight to a ``JSONValue``, keeping ints and doubles apart (which a
/// round trip through `JSONEncoder` text does not: it writes `1.0` as `1`).
///
/// Dates become ISO 8601 strings with milliseconds (they sort as text, like `serverTimestamp`),
/// `Data` becomes base64, URLs their absolute string.
///
/// ```swift
/// let body = try JSONValueEncoder().encodeObject(user)   // JSONObject
/// ```
public struct JSONValueEncoder: Sendable {
    /// Creates an encoder; it has no options.
    public init() {}

    /// Encodes a value.
    public func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        let node = EncodingNode()
        try node.encodeValue(value, codingPath: [])
        return node.resolve()
    }

    /// Encodes a value that must become an object, as a document body is. Throws `invalid-argument`
    /// otherwise.
    public func encodeObject<T: Encodable>(_ value: T) throws -> JSONObject {
        guard case .object(let object) = try encode(value) else {
            throw TandemError.invalidArgument("\(T.self) does not encode to a JSON object; a document body must be one. Encode a struct or a dictionary.")
        }
        return object
    }
}

/// A node of the value being built; containers write into nodes, which resolve to a JSONValue.
/// A container's scalar members are kept as values, without a node of their own, and its
/// members are changed in place (taken out of `content` first, so never copied).
final class EncodingNode {
    /// A member of an object or an array: a value already, or a node still being written.
    enum Slot {
        case value(JSONValue)
        case node(EncodingNode)

        func resolve() -> JSONValue {
            switch self {
            case .value(let value): return value
            case .node(let node): return node.resolve()
            }
        }
    }

    enum Content {
        case empty
        case value(JSONValue)
        case object([String: Slot])
        case array([Slot])
    }

    var content: Content = .empty

    func resolve() -> JSONValue {
        switch content {
        case .empty: return .object([:])
        case .value(let value): return value
        case .object(let members): return .object(members.mapValues { $0.resolve() })
        case .array(let members): return .array(members.map { $0.resolve() })
        }
    }

    /// Sets an object's member to a value (nothing when this node is not an object).
    func set(_ value: JSONValue, forKey key: String) {
        guard case .object(var members) = content else { return }
        content = .empty
        members[key] = .value(value)
        content = .object(members)
    }

    /// The node of an object's member, made when it is not one yet (a detached node when this
    /// node is not an object: what is written there is dropped, as the container was misused).
    func member(_ key: String) -> EncodingNode {
        guard case .object(var members) = content else { return EncodingNode() }
        if case .node(let existing)? = members[key] { return existing }
        let node = EncodingNode()
        content = .empty
        members[key] = .node(node)
        content = .object(members)
        return node
    }

    /// Appends a value to an array (nothing when this node is not an array).
    func append(_ value: JSONValue) {
        guard case .array(var members) = content else { return }
        content = .empty
        members.append(.value(value))
        content = .array(members)
    }

    /// Appends a node to an array and returns it (a detached node when this node is not one).
    func appendNode() -> EncodingNode {
        guard case .array(var members) = content else { return EncodingNode() }
        let node = EncodingNode()
        content = .empty
        members.append(.node(node))
        content = .array(members)
        return node
    }

    var count: Int {
        if case .array(let members) = content { return members.count }
        return 0
    }

    func encodeValue<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        if let direct = try Self.direct(value) {
            content = .value(direct)
            return
        }
        try value.encode(to: ValueEncoder(node: self, codingPath: codingPath))
    }

    /// Values with a direct JSON form: the common scalars, and those whose own (Foundation-specific)
    /// Codable forms are skipped.
    static func direct<T: Encodable>(_ value: T) throws -> JSONValue? {
        switch value {
        case let string as String: return .string(string)
        case let int as Int: return .int(int)
        case let double as Double: return .double(double)
        case let bool as Bool: return .bool(bool)
        case let json as JSONValue: return json
        case let date as Date: return .string(ServerTime(date).iso8601)
        case let data as Data: return .string(data.base64EncodedString())
        case let url as URL: return .string(url.absoluteString)
        default: return nil
        }
    }
}

struct ValueEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([:]) }
        return KeyedEncodingContainer(KeyedValueEncoder<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedValueEncoder(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleValueEncoder(node: node, codingPath: codingPath)
    }
}

struct KeyedValueEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    private func child(_ key: any CodingKey) -> EncodingNode { node.member(key.stringValue) }

    private func set(_ value: JSONValue, _ key: Key) { node.set(value, forKey: key.stringValue) }

    mutating func encodeNil(forKey key: Key) throws { set(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { set(.double(value), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { set(.double(Double(value)), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(.int(value), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(try unsigned(value), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(.int(Int(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(try unsigned(value), key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if let direct = try EncodingNode.direct(value) { return set(direct, key) }
        try child(key).encodeValue(value, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoder(node: child(key), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        ValueEncoder(node: child(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        ValueEncoder(node: child(IndexKey(stringValue: "super")), codingPath: codingPath)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoder(node: child(key), codingPath: codingPath + [key])
    }
}

struct UnkeyedValueEncoder: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    var count: Int { node.count }

    private func append() -> EncodingNode { node.appendNode() }

    private func add(_ value: JSONValue) { node.append(value) }

    mutating func encodeNil() throws { add(.null) }
    mutating func encode(_ value: Bool) throws { add(.bool(value)) }
    mutating func encode(_ value: String) throws { add(.string(value)) }
    mutating func encode(_ value: Double) throws { add(.double(value)) }
    mutating func encode(_ value: Float) throws { add(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { add(.int(value)) }
    mutating func encode(_ value: Int8) throws { add(.int(Int(value))) }
    mutating func encode(_ value: Int16) throws { add(.int(Int(value))) }
    mutating func encode(_ value: Int32) throws { add(.int(Int(value))) }
    mutating func encode(_ value: Int64) throws { add(.int(Int(value))) }
    mutating func encode(_ value: UInt) throws { add(try unsigned(value)) }
    mutating func encode(_ value: UInt8) throws { add(.int(Int(value))) }
    mutating func encode(_ value: UInt16) throws { add(.int(Int(value))) }
    mutating func encode(_ value: UInt32) throws { add(.int(Int(value))) }
    mutating func encode(_ value: UInt64) throws { add(try unsigned(value)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if let direct = try EncodingNode.direct(value) { return add(direct) }
        let index = count
        try append().encodeValue(value, codingPath: codingPath + [IndexKey(intValue: index)])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoder(node: append(), codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        ValueEncoder(node: append(), codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        ValueEncoder(node: append(), codingPath: codingPath)
    }
}

struct SingleValueEncoder: SingleValueEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    private func set(_ value: JSONValue) { node.content = .value(value) }

    mutating func encodeNil() throws { set(.null) }
    mutating func encode(_ value: Bool) throws { set(.bool(value)) }
    mutating func encode(_ value: String) throws { set(.string(value)) }
    mutating func encode(_ value: Double) throws { set(.double(value)) }
    mutating func encode(_ value: Float) throws { set(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { set(.int(value)) }
    mutating func encode(_ value: Int8) throws { set(.int(Int(value))) }
    mutating func encode(_ value: Int16) throws { set(.int(Int(value))) }
    mutating func encode(_ value: Int32) throws { set(.int(Int(value))) }
    mutating func encode(_ value: Int64) throws { set(.int(Int(value))) }
    mutating func encode(_ value: UInt) throws { set(try unsigned(value)) }
    mutating func encode(_ value: UInt8) throws { set(.int(Int(value))) }
    mutating func encode(_ value: UInt16) throws { set(.int(Int(value))) }
    mutating func encode(_ value: UInt32) throws { set(.int(Int(value))) }
    mutating func encode(_ value: UInt64) throws { set(try unsigned(value)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try node.encodeValue(value, codingPath: codingPath)
    }
}

/// An unsigned integer as an int; one too large for `Int` becomes a double rather than failing.
private func unsigned<U: UnsignedInteger>(_ value: U) throws -> JSONValue {
    if let int = Int(exactly: value) { return .int(int) }
    return .double(Double(value))
}

/// A coding key for array positions and `super`.
struct IndexKey: CodingKey {
    private let name: String?
    let intValue: Int?

    /// An index's string is made only when asked for (an error message): most keys never are.
    var stringValue: String { name ?? String(intValue ?? 0) }

    init(stringValue: String) {
        self.name = stringValue
        self.intValue = nil
    }

    init(intValue: Int) {
        self.name = nil
        self.intValue = intValue
    }
}
