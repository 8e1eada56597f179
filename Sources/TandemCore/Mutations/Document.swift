import Foundation

/// A stored document: its path, body, and the metadata the server stamps on it.
public struct Document: Sendable, Hashable, Codable, QueryDocument {
    /// Where the document lives.
    public var path: DocumentPath
    /// The document's body: its fields.
    public var data: JSONObject
    /// The version of the commit that last wrote it.
    public var version: Version
    /// When the document was created: the server's commit time of the write that made it exist.
    public var createTime: Date
    /// The server's commit time of the write that last changed it.
    public var updateTime: Date

    /// A document from its parts. `version` defaults to `.zero`, `createTime` to the start of 1970,
    /// and `updateTime` to `createTime`.
    public init(path: DocumentPath, data: JSONObject, version: Version = .zero, createTime: Date = Date(timeIntervalSince1970: 0), updateTime: Date? = nil) {
        self.path = path
        self.data = data
        self.version = version
        self.createTime = createTime
        self.updateTime = updateTime ?? createTime
    }
}
