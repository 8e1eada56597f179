import TandemCore

/// A snapshot written straight to the wire form: groups of changes, each group a JSON array of
/// `{"document","path","version"}` objects, ready to be sent as the frames of one batch.
public struct EncodedSnapshot: Sendable, Hashable {
    /// The version the documents were read at.
    public var version: Version
    /// Each group as the UTF-8 text of a JSON array; one group (possibly empty) at least.
    public var groups: [[UInt8]]
    /// How many documents the groups hold in all.
    public var count: Int

    public init(version: Version, groups: [[UInt8]], count: Int) {
        self.version = version
        self.groups = groups.isEmpty ? [Array("[]".utf8)] : groups
        self.count = count
    }
}
