import Foundation

/// A stored document: its path, body, and the metadata the server stamps on it.
public struct Document: Sendable, Hashable, Codable, QueryDocument {
    public var path: DocumentPath
    public var data: JSONObject
    /// The version of the commit that last wrote it.
    public var version: Version
    public var createTime: Date
    public var updateTime: Date

    public init(path: DocumentPath, data: JSONObject, version: Version = .zero, createTime: Date = Date(timeIntervalSince1970: 0), updateTime: Date? = nil) {
        self.path = path
        self.data = data
        self.version = version
        self.createTime = createTime
        self.updateTime = updateTime ?? createTime
    }
}
