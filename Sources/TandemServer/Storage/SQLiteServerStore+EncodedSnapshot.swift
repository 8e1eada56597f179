import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// Copies each stored body into the wire form as it is: the store wrote it as compact JSON, so
    /// parsing it into values and writing them again (most of an initial sync's server time) is skipped.
    public func encodedSnapshot(_ target: ListenTarget, groupSize: Int) async throws -> EncodedSnapshot? {
        let scope: (column: String, value: String)
        switch target {
        case .collection(let path, let query) where query.operations.isEmpty: scope = ("collection", path.description)
        case .collectionGroup(let group, let query) where query.operations.isEmpty: scope = ("collection_group", group)
        default: return nil
        }
        // The paths of one collection differ only in their last segment, which holds no '/', so
        // SQLite's byte order is their path order. A group's parents differ too, and '/' sorts
        // first in a path, so its rows may need sorting.
        let rowsInPathOrder = scope.column == "collection"
        return try await readDatabase { db in
            let version = try Self.committedVersion(db)
            let statement = try db.cachedStatement(sql: """
                SELECT path, version, create_time, update_time, data FROM documents
                WHERE \(scope.column) = ? AND data IS NOT NULL ORDER BY path
                """)
            let rows = try Row.fetchCursor(statement, arguments: [scope.value])
            var grouper = ChangeGrouper(groupSize: max(1, groupSize))
            if rowsInPathOrder {
                while let row = try rows.next() {
                    grouper.startChange()
                    try Self.writeStoredChange(row, to: &grouper.writer)
                }
            } else {
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
                    grouper.startChange()
                    grouper.writer.raw(change.bytes)
                }
            }
            return EncodedSnapshot(version: version, groups: grouper.finish(), count: grouper.count)
        }
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

/// Cuts a run of written changes into JSON arrays of at most `groupSize` changes.
struct ChangeGrouper {
    let groupSize: Int
    var writer = WireWriter(capacity: 4096)
    private var groups: [[UInt8]] = []
    private var inGroup = 0
    private(set) var count = 0

    init(groupSize: Int) {
        self.groupSize = groupSize
    }

    /// Call before writing each change.
    mutating func startChange() {
        if inGroup == groupSize { closeGroup() }
        writer.raw(inGroup == 0 ? "[" : ",")
        inGroup += 1
        count += 1
    }

    private mutating func closeGroup() {
        writer.raw("]")
        groups.append(writer.bytes)
        writer = WireWriter(capacity: writer.bytes.count + 256)
        inGroup = 0
    }

    mutating func finish() -> [[UInt8]] {
        if inGroup > 0 { closeGroup() }
        return groups
    }
}
