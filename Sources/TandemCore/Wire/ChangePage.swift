/// One page of a change feed.
public struct ChangePage: Sendable, Hashable {
    public var changes: [RemoteChange]
    /// Everything up to this version is in this page or earlier ones: the `since` of the next page.
    public var version: Version
    /// Whether more changes follow this page.
    public var hasMore: Bool

    public init(changes: [RemoteChange], version: Version, hasMore: Bool) {
        self.changes = changes
        self.version = version
        self.hasMore = hasMore
    }
}
