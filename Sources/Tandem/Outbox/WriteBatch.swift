import TandemCore

/// The writes of one atomic batch on a ``CollectionSyncEngine``, built in
/// ``CollectionSyncEngine/commit(_:)``: the server applies all of them or none.
///
/// ```swift
/// try await engine.commit { batch in
///     batch.save(lamp)
///     batch.update(id: "desk", data: ["stock": .increment(-1)])
///     batch.delete(id: "stool")
/// }
/// ```
public struct WriteBatch<T: SyncModel> {
    let collection: CollectionPath
    private(set) var mutations: [Mutation] = []
    /// The first write that could not be made (an invalid id, a model that does not encode):
    /// thrown by `commit` before anything is written.
    private(set) var failure: (any Error)?

    init(collection: CollectionPath) {
        self.collection = collection
    }

    /// Saves (replaces) a document.
    public mutating func save(_ model: T) {
        let collection = self.collection
        record { .set(try collection.document(model.id), try JSONValueEncoder().encodeObject(model)) }
    }

    /// Updates fields (dotted paths) of a document, with transforms such as `.increment(1)`.
    public mutating func update(id: String, data: [String: FieldUpdate]) {
        let collection = self.collection
        record { try FieldUpdate.mutation(try collection.document(id), data) }
    }

    /// Deletes a document.
    public mutating func delete(id: String) {
        let collection = self.collection
        record { .delete(try collection.document(id)) }
    }

    private mutating func record(_ make: () throws -> Mutation) {
        guard failure == nil else { return }
        do {
            mutations.append(try make())
        } catch {
            failure = error
        }
    }
}

/// The mutations of one atomic request to `TandemClient.commit(_:)`, built in
/// ``TandemClient/commit(batch:)``.
///
/// ```swift
/// try await client.commit { batch in
///     batch.set(try DocumentPath("products/lamp"), ["price": 30])
///     batch.update(try DocumentPath("products/desk"), fields: ["stock": 0])
///     batch.delete(try DocumentPath("products/stool"))
/// }
/// ```
public struct MutationBatch: Sendable {
    /// The mutations added so far, in order.
    public private(set) var mutations: [Mutation] = []

    /// An empty batch.
    public init() {}

    /// Replaces a document.
    public mutating func set(_ path: DocumentPath, _ data: JSONObject) { mutations.append(.set(path, data)) }
    /// Sets fields, keeping the others (all fields of `data`, or only `fields`).
    public mutating func merge(_ path: DocumentPath, _ data: JSONObject, fields: [FieldPath]? = nil) {
        mutations.append(.merge(path, data, fields: fields))
    }
    /// Updates fields of an existing document.
    public mutating func update(_ path: DocumentPath, fields: [FieldPath: JSONValue]) { mutations.append(.update(path, fields: fields)) }
    /// Deletes a document.
    public mutating func delete(_ path: DocumentPath) { mutations.append(.delete(path)) }
    /// Adds any mutation.
    public mutating func add(_ mutation: Mutation) { mutations.append(mutation) }
}
