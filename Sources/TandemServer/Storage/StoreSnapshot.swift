import TandemCore

/// Documents read at one version: the read reflects every commit at or below it and none above.
public struct StoreSnapshot: Sendable, Hashable {
    public var documents: [Document]
    public var version: Version

    public init(documents: [Document], version: Version) {
        self.documents = documents
        self.version = version
    }
}
