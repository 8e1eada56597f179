import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// Copies each stored body into the wire form as it is: the store wrote it as compact JSON, so
    /// parsing it into values and writing them again (most of an initial sync's server time) is
    /// skipped. A collection's frames go out while the rest is still being read.
    public func encodedSnapshot(_ target: ListenTarget, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) async throws -> Version? {
        let scope: (column: String, value: String)
        switch target {
        case .collection(let path, let query) where query.operations.isEmpty: scope = ("collection", path.description)
        case .collectionGroup(let group, let query) where query.operations.isEmpty: scope = ("collection_group", group)
        default: return nil
        }
        // The paths of one collection differ only in their last segment, which holds no '/', so
        // SQLite's byte order is their path order. A group's parents differ too, and '/' sorts
        // first in a path, so its rows may need sorting.
        let isCollection = scope.column == "collection"
        return try await readDatabase { db in
            let version = try Self.committedVersion(db)
            var framer = SnapshotFramer(version: version, groupSize: max(1, groupSize), frames: frames)
            if isCollection {
                switch try Self.scanCollection(scope.value, db, into: &framer) {
                case .stopped:
                    return version
                case .done:
                    break
                case .passedTooMany(let after):
                    // Too much else under the collection's paths: the rest through its index (by
                    // version), sorted.
                    let rows = try RawStatement(db, sql: """
                        SELECT path, version, create_time, update_time, data FROM documents
                        WHERE collection = ? AND data IS NOT NULL AND path > ? ORDER BY path
                        """)
                    defer { rows.reset() }
                    try rows.bind(1, scope.value)
                    try rows.bind(2, after)
                    while try rows.step() {
                        guard framer.startChange() else { return version }
                        try Self.writeStoredChange(rows, to: &framer.writer)
                    }
                }
            } else {
                let rows = try RawStatement(db, sql: """
                    SELECT path, version, create_time, update_time, data FROM documents
                    WHERE collection_group = ? AND data IS NOT NULL ORDER BY path
                    """)
                defer { rows.reset() }
                try rows.bind(1, scope.value)
                var changes: [(path: DocumentPath, bytes: [UInt8])] = []
                while try rows.step() {
                    var writer = WireWriter(capacity: 256)
                    try Self.writeStoredChange(rows, to: &writer)
                    changes.append((try Self.documentPath(rows), writer.bytes))
                }
                if !zip(changes, changes.dropFirst()).allSatisfy({ $0.path < $1.path }) {
                    changes.sort { $0.path < $1.path }
                }
                for change in changes {
                    guard framer.startChange() else { return version }
                    framer.writer.raw(change.bytes)
                }
            }
            framer.finish()
            return version
        }
    }

    /// How many rows a collection's scan may pass over (subcollection documents, tombstones) beyond
    /// those it sends before it leaves the rest to the collection's index.
    static let collectionScanAllowance = 1_000

    enum CollectionScanEnd {
        case done
        /// The receiver wanted no more.
        case stopped
        /// Passed too many rows of other collections; the rest comes after this path.
        case passedTooMany(after: String)
    }

    /// Writes a collection's documents by walking the table itself over the paths that start with
    /// the collection's: in path order, reading each row where it lies, where the collection's
    /// index (kept by version, so that commits append to it) would cost a lookup per document and
    /// a sort. The same paths hold its subcollections' documents: past `collectionScanAllowance`
    /// more of those than of its own, it stops and says where.
    static func scanCollection(_ collection: String, _ db: Database, into framer: inout SnapshotFramer) throws -> CollectionScanEnd {
        // Every path under "c/" sorts between "c/" and "c0" ('0' follows '/').
        let rows = try RawStatement(db, sql: """
            SELECT path, version, create_time, update_time, data, collection FROM documents
            WHERE path > ? AND path < ? ORDER BY path
            """)
        defer { rows.reset() }
        try rows.bind(1, collection + "/")
        try rows.bind(2, collection + "0")
        var collectionBytes = collection
        var sent = 0
        var passed = 0
        while try rows.step() {
            let ours = collectionBytes.withUTF8 { name in rows.bytes(5).map { $0.elementsEqual(name) } ?? false }
            guard ours, rows.bytes(4) != nil else {
                passed += 1
                // Everything of the collection before this row is sent: the index takes it from here.
                if passed > sent + collectionScanAllowance { return .passedTooMany(after: rows.text(0) ?? "") }
                continue
            }
            guard framer.startChange() else { return .stopped }
            try writeStoredChange(rows, to: &framer.writer)
            sent += 1
        }
        return .done
    }

    /// The row of `SELECT path, version, create_time, update_time, data` a statement is on, as a
    /// wire change.
    static func writeStoredChange(_ row: RawStatement, to writer: inout WireWriter) throws {
        guard let path = row.bytes(0), let version = row.int64(1), let created = row.int64(2), let updated = row.int64(3),
              let body = row.bytes(4), body.first == UInt8(ascii: "{"), body.last == UInt8(ascii: "}") else {
            throw TandemError(.dataLoss, "The stored body of \(row.text(0) ?? "?") is not a JSON object.")
        }
        writer.storedChange(path: path, version: version, createMilliseconds: created, updateMilliseconds: updated, body: body)
    }
}

/// Cuts a run of written changes into frames of at most `groupSize` changes and hands each on. A
/// full frame waits until the next change starts (or the end), so the last one is known as last.
struct SnapshotFramer {
    let version: Version
    let groupSize: Int
    let frames: @Sendable (EncodedSnapshotFrame) -> Bool
    var writer = WireWriter(capacity: 4096)
    private var inGroup = 0
    private var held: EncodedSnapshotFrame?

    init(version: Version, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) {
        self.version = version
        self.groupSize = groupSize
        self.frames = frames
    }

    /// Call before writing each change; false when the receiver wants no more.
    mutating func startChange() -> Bool {
        if inGroup == groupSize {
            writer.raw("]")
            guard hold(writer.bytes, count: inGroup) else { return false }
            writer = WireWriter(capacity: writer.bytes.count + 256)
            inGroup = 0
        }
        writer.raw(inGroup == 0 ? "[" : ",")
        inGroup += 1
        return true
    }

    /// Sends what is left, the last frame marked so (an empty array when there was nothing).
    mutating func finish() {
        if inGroup > 0 {
            writer.raw("]")
            guard hold(writer.bytes, count: inGroup) else { return }
        }
        var last = held ?? EncodedSnapshotFrame(version: version, changes: Array("[]".utf8), count: 0, isLast: true)
        last.isLast = true
        held = nil
        _ = frames(last)
    }

    /// Keeps a finished frame and sends the one held before it; false when the receiver stopped.
    private mutating func hold(_ changes: [UInt8], count: Int) -> Bool {
        defer { held = EncodedSnapshotFrame(version: version, changes: changes, count: count, isLast: false) }
        guard let previous = held else { return true }
        return frames(previous)
    }
}
