/// Receives what an ``IdentityMap`` stores and what it refuses, for debugging and analytics.
///
/// ```swift
/// struct PrintMapLogger: IdentityMapLogger {
///     func didStore<T: Identifiable>(_ type: T.Type, id: T.ID) { print("stored", type, id) }
///     func didFailedToStore<T: Identifiable>(_ type: T.Type, id: T.ID, error: IdentityMapError) {
///         print("refused", type, id, error)
///     }
/// }
/// let map = IdentityMap(logger: PrintMapLogger())
/// ```
///
/// Called after the map's lock is released, on the storing thread, once per entity given to a
/// `store` call (not for the entities nested in an aggregate). A batch that is refused reports
/// every entity of it, since none was stored.
public protocol IdentityMapLogger: Sendable {
    /// The entity of this type and id was stored.
    func didStore<T: Identifiable>(_ type: T.Type, id: T.ID)
    /// The entity of this type and id was not stored, for the reason `error` gives (a stale stamp).
    func didFailedToStore<T: Identifiable>(_ type: T.Type, id: T.ID, error: IdentityMapError)
}
