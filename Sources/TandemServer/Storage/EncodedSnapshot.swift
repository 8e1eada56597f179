import Synchronization
import TandemCore

/// One frame's worth of a snapshot a store wrote straight to the wire form: a JSON array of
/// `{"document","path","version"}` change objects.
public struct EncodedSnapshotFrame: Sendable, Hashable {
    /// The version the documents were read at (the same in every frame of a snapshot).
    public var version: Version
    /// The changes as the UTF-8 text of a JSON array (`[]` when the snapshot is empty).
    public var changes: [UInt8]
    /// How many changes the array holds.
    public var count: Int
    /// Whether this is the snapshot's last frame.
    public var isLast: Bool

    /// A frame of `count` changes, encoded in `changes`, read at `version`; `isLast` marks the
    /// snapshot's last frame.
    public init(version: Version, changes: [UInt8], count: Int, isLast: Bool) {
        self.version = version
        self.changes = changes
        self.count = count
        self.isLast = isLast
    }
}

/// A whole snapshot written straight to the wire form: its frames' change arrays, in order.
public struct EncodedSnapshot: Sendable, Hashable {
    /// The version the documents were read at.
    public var version: Version
    /// Each group as the UTF-8 text of a JSON array; one group (possibly empty) at least.
    public var groups: [[UInt8]]
    /// How many documents the groups hold in all.
    public var count: Int

    /// A snapshot read at `version` whose `groups` hold `count` documents in all; no groups
    /// become one empty group (`[]`).
    public init(version: Version, groups: [[UInt8]], count: Int) {
        self.version = version
        self.groups = groups.isEmpty ? [Array("[]".utf8)] : groups
        self.count = count
    }
}

extension ServerStore {
    /// Collects what ``encodedSnapshot(_:groupSize:frames:)`` streams into one value; nil when the
    /// store does not write snapshots itself.
    public func encodedSnapshot(_ target: ListenTarget, groupSize: Int) async throws -> EncodedSnapshot? {
        let collected = Mutex<(groups: [[UInt8]], count: Int)>(([], 0))
        guard let version = try await encodedSnapshot(target, groupSize: groupSize, frames: { frame in
            collected.withLock {
                $0.groups.append(frame.changes)
                $0.count += frame.count
            }
            return true
        }) else { return nil }
        let (groups, count) = collected.withLock { $0 }
        return EncodedSnapshot(version: version, groups: groups, count: count)
    }
}
