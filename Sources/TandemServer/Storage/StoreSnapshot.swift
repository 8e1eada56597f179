import TandemCore

/// Documents read at one version: the read reflects every commit at or below it and none above.
public struct StoreSnapshot: Sendable, Hashable {
    /// The documents the read returned.
    public var documents: [Document]
    /// The version the documents were read at.
    public var version: Version

    /// A snapshot of `documents` read at `version`.
    public init(documents: [Document], version: Version) {
        self.documents = documents
        self.version = version
    }
}
