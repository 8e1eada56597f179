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
                    let statement = try db.cachedStatement(sql: """
                        SELECT path, version, create_time, update_time, data FROM documents
                        WHERE collection = ? AND data IS NOT NULL AND path > ? ORDER BY path
                        """)
                    let rows = try Row.fetchCursor(statement, arguments: [scope.value, after])
                    while let row = try rows.next() {
                        guard framer.startChange() else { return version }
                        try Self.writeStoredChange(row, to: &framer.writer)
                    }
                }
            } else {
                let statement = try db.cachedStatement(sql: """
                    SELECT path, version, create_time, update_time, data FROM documents
                    WHERE collection_group = ? AND data IS NOT NULL ORDER BY path
                    """)
                let rows = try Row.fetchCursor(statement, arguments: [scope.value])
                var changes: [(path: DocumentPath, bytes: [UInt8])] = []
                while let row = try rows.next() {
                    var writer = WireWriter(capacity: 256)
                    try Self.writeStoredChange(row, to: &writer)
                    changes.append((try Self.documentPath(row), writer.bytes))
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
        let statement = try db.cachedStatement(sql: """
            SELECT path, version, create_time, update_time, data, collection FROM documents
            WHERE path > ? AND path < ? ORDER BY path
            """)
        let rows = try Row.fetchCursor(statement, arguments: [collection + "/", collection + "0"])
        var collectionBytes = collection
        var sent = 0
        var passed = 0
        while let row = try rows.next() {
            let ours = try collectionBytes.withUTF8 { name in
                try row.withUnsafeData(atIndex: 5) { data in
                    data.map { $0.elementsEqual(name) } ?? false
                }
            }
            guard ours, !row.hasNull(atIndex: 4) else {
                passed += 1
                // Everything of the collection before this row is sent: the index takes it from here.
                if passed > sent + collectionScanAllowance { return .passedTooMany(after: row[0]) }
                continue
            }
            guard framer.startChange() else { return .stopped }
            try writeStoredChange(row, to: &framer.writer)
            sent += 1
        }
        return .done
    }

    /// A row of `SELECT path, version, create_time, update_time, data` as a wire change.
    static func writeStoredChange(_ row: Row, to writer: inout WireWriter) throws {
        let version: Int64 = row[1]
        let created: Int64 = row[2]
        let updated: Int64 = row[3]
        try row.withUnsafeData(atIndex: 0) { path in
            try row.withUnsafeData(atIndex: 4) { body in
                guard let path, let body, body.first == UInt8(ascii: "{"), body.last == UInt8(ascii: "}") else {
                    let text = path.map { String(decoding: $0, as: UTF8.self) } ?? "?"
                    throw TandemError(.dataLoss, "The stored body of \(text) is not a JSON object.")
                }
                path.withUnsafeBytes { pathBytes in
                    body.withUnsafeBytes { bodyBytes in
                        writer.storedChange(
                            path: pathBytes.assumingMemoryBound(to: UInt8.self), version: version,
                            createMilliseconds: created, updateMilliseconds: updated,
                            body: bodyBytes.assumingMemoryBound(to: UInt8.self))
                    }
                }
            }
        }
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
