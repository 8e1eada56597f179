/// One write to one document: `set` (replace), `set(merge:)`, `update` (field paths) or `delete`,
/// with field transforms, an optional precondition, and the ``MutationID`` that makes it exactly-once.
///
/// ```swift
/// let bump = Mutation.update(try DocumentPath("counters/visits"), fields: [:],
///                            transforms: [.init("count", .increment(1))])
/// let after = try bump.apply(to: current, version: 42, serverTime: ServerTime(.now))
/// ```
public struct Mutation: Sendable, Hashable, Codable {
    /// What the write does to the document body.
    public enum Kind: Sendable, Hashable, Codable {
        /// Replaces the body.
        case set(JSONObject)
        /// Merges into the body: nested maps merge, other values replace. With `fields`, only those
        /// field paths are written (and a path absent from the data is removed).
        case merge(JSONObject, fields: [FieldPath]?)
        /// Sets field paths on an existing document; fails with `not-found` when it does not exist.
        case update([FieldValue])
        /// Removes the document, leaving a tombstone.
        case delete
    }

    /// A value for one field path of an `update`.
    public struct FieldValue: Sendable, Hashable, Codable {
        /// The field path to set.
        public var field: FieldPath
        /// The value to set it to.
        public var value: JSONValue
        /// A value for a field path.
        public init(_ field: FieldPath, _ value: JSONValue) {
            self.field = field
            self.value = value
        }
    }

    /// A transform of one field path.
    public struct Transform: Sendable, Hashable, Codable {
        /// The field path to transform.
        public var field: FieldPath
        /// The change made to the field's value.
        public var transform: FieldTransform
        /// A transform of a field path, such as `.init("count", .increment(1))`.
        public init(_ field: FieldPath, _ transform: FieldTransform) {
            self.field = field
            self.transform = transform
        }
    }

    /// A condition on the current document that must hold for the write to apply.
    public enum Precondition: Sendable, Hashable, Codable {
        /// The document must (true) or must not (false) exist.
        case exists(Bool)
        /// The document must be at exactly this version; version 0 means it must not exist.
        case version(Version)
    }

    /// The document the write is to.
    public var path: DocumentPath
    /// What the write does to the document body.
    public var kind: Kind
    /// Field transforms, applied after the writes of `kind`, each to the field's value before the
    /// write. A delete ignores them.
    public var transforms: [Transform]
    /// A condition on the current document for the write to apply, or nil for none. When it does
    /// not hold, the write fails with `failed-precondition`.
    public var precondition: Precondition?
    /// Set by the client that sends the write; nil for writes made directly on the server.
    public var id: MutationID?
    /// The data of a `set` exactly as JSON text (compact, an object), when its writer has it:
    /// sent as it is instead of encoded again. Not part of equality: it spells the data.
    package var encodedData: String?

    private enum CodingKeys: String, CodingKey {
        case path, kind, transforms, precondition, id
    }

    public static func == (lhs: Mutation, rhs: Mutation) -> Bool {
        lhs.path == rhs.path && lhs.kind == rhs.kind && lhs.transforms == rhs.transforms && lhs.precondition == rhs.precondition && lhs.id == rhs.id
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(kind)
        hasher.combine(transforms)
        hasher.combine(precondition)
        hasher.combine(id)
    }

    /// A mutation from its parts. The static `set`, `merge`, `update` and `delete` build the common
    /// ones; `requiring(_:)` and `identified(by:)` add a precondition and an id.
    public init(path: DocumentPath, kind: Kind, transforms: [Transform] = [], precondition: Precondition? = nil, id: MutationID? = nil) {
        self.path = path
        self.kind = kind
        self.transforms = transforms
        self.precondition = precondition
        self.id = id
    }

    /// Replaces the document's body.
    public static func set(_ path: DocumentPath, _ data: JSONObject, transforms: [Transform] = []) -> Mutation {
        Mutation(path: path, kind: .set(data), transforms: transforms)
    }

    /// Merges into the document's body (all fields, or only `fields`).
    public static func merge(_ path: DocumentPath, _ data: JSONObject, fields: [FieldPath]? = nil, transforms: [Transform] = []) -> Mutation {
        Mutation(path: path, kind: .merge(data, fields: fields), transforms: transforms)
    }

    /// Sets field paths of an existing document.
    public static func update(_ path: DocumentPath, fields: [FieldPath: JSONValue], transforms: [Transform] = []) -> Mutation {
        let values = fields.map { FieldValue($0.key, $0.value) }.sorted { $0.field.description < $1.field.description }
        return Mutation(path: path, kind: .update(values), transforms: transforms)
    }

    /// Deletes the document.
    public static func delete(_ path: DocumentPath) -> Mutation {
        Mutation(path: path, kind: .delete)
    }

    /// The same mutation with a precondition.
    public func requiring(_ precondition: Precondition) -> Mutation {
        var copy = self
        copy.precondition = precondition
        return copy
    }

    /// The same mutation carrying a mutation id.
    public func identified(by id: MutationID) -> Mutation {
        var copy = self
        copy.id = id
        return copy
    }
}
