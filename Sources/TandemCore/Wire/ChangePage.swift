/// One page of a change feed.
public struct ChangePage: Sendable, Hashable {
    /// The changes since the version the page was asked for, oldest commit first; a commit is never
    /// split across pages.
    public var changes: [RemoteChange]
    /// Everything up to this version is in this page or earlier ones: the `since` of the next page.
    public var version: Version
    /// Whether more changes follow this page.
    public var hasMore: Bool

    /// A page from its changes, the version it reaches, and whether more follow.
    public init(changes: [RemoteChange], version: Version, hasMore: Bool) {
        self.changes = changes
        self.version = version
        self.hasMore = hasMore
    }
}
