/// A model the sync engines keep in sync: `Codable` to and from a document body, `Sendable`, and
/// identified by a `String` id, the last segment of its document path.
///
/// ```swift
/// struct UserModel: SyncModel {
///     let id: String
///     var name: String
///     var age: Int
///
///     var eventParameters: [String: any Sendable] { ["user_name": name, "user_age": age] }
///     static var mocks: [UserModel] { [UserModel(id: "1", name: "Ada", age: 36)] }
/// }
/// ```
public protocol SyncModel: Codable, Sendable, Identifiable where ID == String {
    /// Parameters added to the analytics events about this model. Default: `["id": id]`.
    var eventParameters: [String: any Sendable] { get }
    /// Sample values for previews and tests. Default: none.
    static var mocks: [Self] { get }
}

extension SyncModel {
    public var eventParameters: [String: any Sendable] { ["id": id] }
    public static var mocks: [Self] { [] }
}
