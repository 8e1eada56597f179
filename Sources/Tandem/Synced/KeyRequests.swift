/// A reusable, parameterised collection request: the configuration of a ``SyncedCollection`` made
/// from values (a user's todos at `users/\(uid)/todos`).
///
/// ```swift
/// struct UserTodos: KeyCollectionRequest {
///     let userId: String
///     var configuration: CollectionConfiguration<Todo> {
///         .init(collectionPath: "users/\(userId)/todos", orderBy: ("memo", true))
///     }
/// }
/// let todos = SyncedCollection(UserTodos(userId: uid), client: client)
/// ```
public protocol KeyCollectionRequest: Sendable {
    /// The type of the collection's elements.
    associatedtype Value: DocumentIdentifiable
    /// The configuration this request stands for, made from its values.
    var configuration: CollectionConfiguration<Value> { get }
}

/// A reusable, parameterised document request: the configuration of a ``SyncedDocument``.
public protocol KeyDocumentRequest: Sendable {
    /// The type of the document's value.
    associatedtype Value: DocumentIdentifiable
    /// The configuration this request stands for, made from its values.
    var configuration: DocumentConfiguration<Value> { get }
}
