import Foundation
import GRDB
import TandemCore

/// What a queue keeps beside its changes: the newest queued state of records, the server's state
/// of each (its base), a read of the whole feed under way, and the account's writer.
extension ChangeQueueStore {
    /// The newest queued state of each of these records (a save, sent or not), if any.
    func newestQueued(account: String, ids: [String]) throws -> [String: SyncedRecord] {
        try queue.read { db in try syncCache(db) }
        var newest: [String: SyncedRecord] = [:]
        let complete = cache.withLock { cache -> Bool in
            for id in ids {
                guard let rowIDs = cache.byRecord[RecordKey(account: account, recordID: id)] else { continue }
                for rowID in rowIDs.reversed() {
                    if let record = cache[rowID, account]?.record {
                        newest[id] = record
                        break
                    }
                }
            }
            return cache.complete.contains(account)
        }
        // Rows queued by an earlier process: the account's queue is read whole once, then known.
        if !complete {
            _ = try pending(account: account)
            return try newestQueued(account: account, ids: ids)
        }
        return newest
    }

    /// The row of the record's change not yet sent, if it has one.
    func unsentRow(account: String, recordID: String) throws -> Int64? {
        try queue.read { db in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT row_id FROM pending WHERE account = ? AND record_id = ? AND sequence IS NULL"),
                               arguments: [account, recordID])
        }
    }

    /// The row of the record's newest change (one not yet sent, else the one sent last), if any.
    func newestRow(account: String, recordID: String) throws -> Int64? {
        try queue.read { db in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT row_id FROM pending WHERE account = ? AND record_id = ? ORDER BY sequence IS NULL DESC, sequence DESC LIMIT 1"),
                               arguments: [account, recordID])
        }
    }

    // MARK: Bases

    /// The server's last state of records, as this engine had it, opened with `encryption`. A base
    /// that cannot be read or opened is left out.
    func bases(account: String, ids: [String], encryption: RecordEncryption?) throws -> [String: SyncedRecord] {
        guard !ids.isEmpty else { return [:] }
        // One statement over a JSON list of the ids: most records asked for have none.
        var list = WireWriter(capacity: ids.count * 12)
        list.raw("[")
        for (index, id) in ids.enumerated() {
            if index > 0 { list.raw(",") }
            list.string(id)
        }
        list.raw("]")
        return try queue.read { db in
            var bases: [String: SyncedRecord] = [:]
            let select = try db.cachedStatement(sql: "SELECT record_id, version, data FROM base WHERE account = ? AND record_id IN (SELECT value FROM json_each(?))")
            let rows = try GRDB.Row.fetchCursor(select, arguments: [account, list.text])
            while let row = try rows.next() {
                let id: String = row[0]
                let version: Int64 = row[1]
                let text: String = row[2]
                if case .object(let fields)? = try? JSONText.parse(text),
                   let record = try? RecordCoding.record(id: id, fields: fields, version: Version(UInt64(max(0, version))), encryption: encryption) {
                    bases[id] = record
                }
            }
            return bases
        }
    }

    /// The types of records as their bases have them.
    func baseTypes(account: String, ids: [String]) throws -> [String: String] {
        guard !ids.isEmpty else { return [:] }
        return try queue.read { db in
            var types: [String: String] = [:]
            let select = try db.cachedStatement(sql: "SELECT json_extract(data, '$.\(RecordFields.type)') FROM base WHERE account = ? AND record_id = ?")
            for id in ids {
                if let type = try String.fetchOne(select, arguments: [account, id]) { types[id] = type }
            }
            return types
        }
    }

    /// Stores the server's state of records as fetched, in order: document data (JSON text) at a
    /// version, or nil for a record that is gone.
    func storeBases(account: String, _ bases: [(id: String, version: Version, data: String?)]) throws {
        try write(account: account) { db in
            let put = try db.cachedStatement(sql: "INSERT OR REPLACE INTO base (account, record_id, version, data) VALUES (?, ?, ?, ?)")
            let delete = try db.cachedStatement(sql: "DELETE FROM base WHERE account = ? AND record_id = ?")
            for base in bases {
                if let data = base.data {
                    try put.execute(arguments: [account, base.id, Int64(clamping: base.version.rawValue), data])
                } else {
                    try delete.execute(arguments: [account, base.id])
                }
            }
        }
    }

    // MARK: Reading the whole feed again

    /// Marks that a read of the account's whole feed from version 0 began (a new device, or a
    /// token the server no longer keeps changes for): if the engine stops before the read ends,
    /// the next fetch reads from 0 again rather than go on from a token whose sweep was lost.
    func beginSweep(account: String) throws {
        try write(account: account) { db in try Self.setMeta(db, account: account, "sweep", "from-start") }
    }

    /// Whether a read of the whole feed from 0 began and did not end.
    func isSweeping(account: String) throws -> Bool {
        try queue.read { db in try Self.meta(db, account: account, "sweep") != nil }
    }

    /// Ends a read of the whole feed from 0 that brought every record in `seen`, through version
    /// `through`: a record this engine knew the server had (its base) at or below `through` that
    /// the read did not bring was deleted, its tombstone since pruned. Such bases are removed and
    /// returned, with their types, to be told as deletions.
    func endSweep(account: String, seen: Set<String>, through: Version) throws -> [RecordDeletion] {
        try write(account: account) { db in
            var gone: [RecordDeletion] = []
            let select = try db.cachedStatement(sql: "SELECT record_id, json_extract(data, '$.\(RecordFields.type)') FROM base WHERE account = ? AND version <= ?")
            let rows = try GRDB.Row.fetchAll(select, arguments: [account, Int64(clamping: through.rawValue)])
            let delete = try db.cachedStatement(sql: "DELETE FROM base WHERE account = ? AND record_id = ?")
            for row in rows {
                let id: String = row[0]
                guard !seen.contains(id) else { continue }
                try delete.execute(arguments: [account, id])
                gone.append(RecordDeletion(recordID: id, recordType: (row[1] as String?) ?? ""))
            }
            try db.execute(sql: "DELETE FROM meta WHERE account = ? AND key = 'sweep'", arguments: [account])
            return gone
        }
    }

    // MARK: Meta

    /// The account's writer id: random, made once, used for nothing else.
    func writer(account: String) throws -> String {
        try write(account: account) { db in try Self.writer(db, account: account) }
    }

    static func writer(_ db: Database, account: String) throws -> String {
        if let writer = try meta(db, account: account, "writer") { return writer }
        let writer = "\(UUID().uuidString.lowercased())/changes"
        try setMeta(db, account: account, "writer", writer)
        return writer
    }

    func meta(account: String, _ key: String) throws -> String? {
        try queue.read { db in try Self.meta(db, account: account, key) }
    }

    func setMeta(account: String, _ key: String, _ value: String) throws {
        try write(account: account) { db in try Self.setMeta(db, account: account, key, value) }
    }

    static func meta(_ db: Database, account: String, _ key: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE account = ? AND key = ?"), arguments: [account, key])
    }

    static func setMeta(_ db: Database, account: String, _ key: String, _ value: String) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (account, key, value) VALUES (?, ?, ?)").execute(arguments: [account, key, value])
    }
}
