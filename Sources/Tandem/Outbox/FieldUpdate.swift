import TandemCore

/// A value in `updateDocument(id:data:)`: a plain value for the field, or a transform.
///
/// ```swift
/// try await engine.updateDocument(id: "p1", data: [
///     "name": "Lamp",
///     "address.city": "Paris",          // dotted field paths reach into maps
///     "views": .increment(1),
///     "tags": .arrayUnion(["sale"]),
///     "draft": .delete,
///     "editedAt": .serverTimestamp,
/// ])
/// ```
public enum FieldUpdate: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    /// Sets the field to this value.
    case value(JSONValue)
    /// Changes the field from its current value (see `FieldTransform`).
    case transform(FieldTransform)

    /// Adds `amount`, which must be a number, to the field; a missing or non-number field counts as 0.
    public static func increment(_ amount: JSONValue) -> FieldUpdate { .transform(.increment(amount)) }
    /// Appends each of `elements` the field's array does not hold yet; a missing or non-array field
    /// counts as empty.
    public static func arrayUnion(_ elements: [JSONValue]) -> FieldUpdate { .transform(.arrayUnion(elements)) }
    /// Removes from the field's array every element equal to one of `elements`; a missing or
    /// non-array field becomes empty.
    public static func arrayRemove(_ elements: [JSONValue]) -> FieldUpdate { .transform(.arrayRemove(elements)) }
    /// Removes the field.
    public static var delete: FieldUpdate { .transform(.delete) }
    /// Sets the field to the server's commit time, as an ISO 8601 string with milliseconds.
    public static var serverTimestamp: FieldUpdate { .transform(.serverTimestamp) }

    public init(stringLiteral value: String) { self = .value(.string(value)) }
    public init(integerLiteral value: Int) { self = .value(.int(value)) }
    public init(floatLiteral value: Double) { self = .value(.double(value)) }
    public init(booleanLiteral value: Bool) { self = .value(.bool(value)) }
    public init(nilLiteral: ()) { self = .value(.null) }
    public init(arrayLiteral elements: JSONValue...) { self = .value(.array(elements)) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .value(.object(Dictionary(elements, uniquingKeysWith: { _, last in last })))
    }

    /// The update mutation for these fields of a document. Field names are dotted paths.
    static func mutation(_ path: DocumentPath, _ data: [String: FieldUpdate]) throws -> Mutation {
        var values: [Mutation.FieldValue] = []
        var transforms: [Mutation.Transform] = []
        for key in data.keys.sorted() {
            let field = try FieldPath(dotted: key)
            switch data[key]! {
            case .value(let value): values.append(.init(field, value))
            case .transform(let transform): transforms.append(.init(field, transform))
            }
        }
        let mutation = Mutation(path: path, kind: .update(values), transforms: transforms)
        try mutation.validate()
        return mutation
    }
}

/// A write the server refused for good, rolled back from the local view.
public struct RejectedWrite: Sendable, Hashable {
    /// The write that was refused.
    public var mutation: Mutation
    /// Why the server refused it (`permission-denied`, `failed-precondition`, …).
    public var error: TandemError
}

/// What the engine knows about a document's state.
public struct DocumentMetadata: Sendable, Hashable {
    /// Local writes to it are not yet acknowledged.
    public var hasPendingWrites: Bool
    /// It comes from the local cache, not (yet) from the server in this session.
    public var isFromCache: Bool
}

/// Where an async read takes its data from.
public enum FetchBehavior: Sendable, Hashable {
    /// The cache when it has the data, else the server.
    case cachedOrFetch
    /// Always the server.
    case alwaysFetch
}
