import Foundation
import GRDB
import Synchronization
import TandemCore

/// The change-sync engine's durable state, in one SQLite file through GRDB, per account: the
/// pending changes (each saved record's state, or its deletion, until the server answers it), the
/// server's last state of each record (the base of a conflict, and of each property's stamp), the
/// writer id and next sequence of the account's mutations, and the device's hybrid logical clock.
///
/// A change is in the file before ``ChangeSyncEngine/sendChanges(modify:delete:)`` returns. Once
/// sent it keeps its mutation (id and content) until answered, so a send after a crash or a
/// reconnect is the same write, applied once.
final class ChangeQueueStore: Sendable {
    /// One stored pending change.
    struct Row: Sendable, Hashable {
        var rowID: Int64
        var recordID: String
        var recordType: String
        var isDeletion: Bool
        /// The record's state to save (nil for a deletion).
        var record: SyncedRecord?
        var bytes: Int
        /// Once sent: its mutation, as sent.
        var mutation: Mutation?

        var change: ChangeSyncStateMachine.PendingChange {
            ChangeSyncStateMachine.PendingChange(recordID: recordID, isDeletion: isDeletion, bytes: bytes, isSent: mutation != nil, rowID: rowID)
        }
    }

    let queue: DatabaseQueue
    /// The rows queued or sent by this process and not yet answered, as read: a send takes them
    /// from here instead of reading and decoding them again.
    private let rows = Mutex<[Int64: Row]>([:])

    /// Opens (creating if needed) the file at `path`.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.journalMode = .wal
        queue = try DatabaseQueue(path: path, configuration: configuration)
        try Self.migrator.migrate(queue)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE pending (
                    row_id INTEGER PRIMARY KEY AUTOINCREMENT,
                    account TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    record_type TEXT NOT NULL,
                    is_deletion INTEGER NOT NULL,
                    record TEXT,
                    bytes INTEGER NOT NULL,
                    mutation TEXT
                );
                CREATE INDEX pending_by_account ON pending (account, row_id);
                CREATE INDEX pending_by_record ON pending (account, record_id);
                CREATE TABLE base (
                    account TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    record TEXT NOT NULL,
                    PRIMARY KEY (account, record_id)
                ) WITHOUT ROWID;
                CREATE TABLE meta (
                    account TEXT NOT NULL,
                    key TEXT NOT NULL,
                    value TEXT NOT NULL,
                    PRIMARY KEY (account, key)
                ) WITHOUT ROWID;
                """)
        }
        return migrator
    }

    // MARK: Pending changes

    /// The account's pending changes, in order. A record with a change sent and not answered and a
    /// newer one has both, the sent one first.
    func pending(account: String) throws -> [Row] {
        try queue.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM pending WHERE account = ? ORDER BY row_id", arguments: [account])
        }
    }

    /// Queues changes, durably: a record's change not yet sent is replaced in place; otherwise the
    /// change joins the end. Returns them as queued (with their rows).
    func enqueue(account: String, saves: [SyncedRecord], deletions: [(id: String, type: String)]) throws -> [Row] {
        let queued = try queue.write { db in
            var rows: [Row] = []
            for record in saves {
                let text = RecordText.encode(record)
                rows.append(try Self.put(db, account: account, recordID: record.id, type: record.type, isDeletion: false, record: text, saving: record,
                                         bytes: text.utf8.count + record.id.utf8.count))
            }
            for deletion in deletions {
                rows.append(try Self.put(db, account: account, recordID: deletion.id, type: deletion.type, isDeletion: true, record: nil, saving: nil,
                                         bytes: deletion.id.utf8.count + 64))
            }
            return rows
        }
        rows.withLock { rows in for row in queued { rows[row.rowID] = row } }
        return queued
    }

    private static func put(_ db: Database, account: String, recordID: String, type: String, isDeletion: Bool, record: String?, saving: SyncedRecord?,
                            bytes: Int) throws -> Row {
        let unsent = try db.cachedStatement(sql: "SELECT row_id FROM pending WHERE account = ? AND record_id = ? AND mutation IS NULL")
        let rowID: Int64
        if let existing = try Int64.fetchOne(unsent, arguments: [account, recordID]) {
            try db.cachedStatement(sql: "UPDATE pending SET record_type = ?, is_deletion = ?, record = ?, bytes = ? WHERE row_id = ?")
                .execute(arguments: [type, isDeletion, record, bytes, existing])
            rowID = existing
        } else {
            try db.cachedStatement(sql: "INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes) VALUES (?, ?, ?, ?, ?, ?)")
                .execute(arguments: [account, recordID, type, isDeletion, record, bytes])
            rowID = db.lastInsertedRowID
        }
        return Row(rowID: rowID, recordID: recordID, recordType: type, isDeletion: isDeletion, record: saving, bytes: bytes, mutation: nil)
    }

    /// The rows of a batch about to be sent, each with its mutation: those sent before keep theirs;
    /// the others get one now (`make`, given the next sequences in order), stored before anything
    /// is sent.
    func prepare(account: String, rowIDs: [Int64], make: (Row, MutationID) throws -> Mutation) throws -> [Row] {
        let known = rows.withLock { rows in rowIDs.map { rows[$0] } }
        let prepared = try queue.write { db in
            let writer = try Self.writer(db, account: account)
            var next = try UInt64(Self.meta(db, account: account, "next_sequence") ?? "1") ?? 1
            var rows: [Row] = []
            let select = try db.cachedStatement(sql: "SELECT * FROM pending WHERE row_id = ? AND account = ?")
            let update = try db.cachedStatement(sql: "UPDATE pending SET mutation = ? WHERE row_id = ?")
            for (rowID, known) in zip(rowIDs, known) {
                guard var row = try known ?? Row.fetchOne(select, arguments: [rowID, account]) else { continue }
                if row.mutation == nil {
                    let mutation = try make(row, MutationID(clientID: writer, sequence: next))
                    next += 1
                    try update.execute(arguments: [JSONText.encode(mutation.wireValue), rowID])
                    row.mutation = mutation
                }
                rows.append(row)
            }
            try Self.setMeta(db, account: account, "next_sequence", String(next))
            return rows
        }
        rows.withLock { rows in for row in prepared { rows[row.rowID] = row } }
        return prepared
    }

    /// Removes answered changes, and stores the server's state of the records they left (nil: gone).
    func settle(account: String, rowIDs: [Int64], bases: [String: SyncedRecord?]) throws {
        rows.withLock { rows in for rowID in rowIDs { rows.removeValue(forKey: rowID) } }
        try queue.write { db in
            let delete = try db.cachedStatement(sql: "DELETE FROM pending WHERE row_id = ? AND account = ?")
            for rowID in rowIDs { try delete.execute(arguments: [rowID, account]) }
            try Self.storeBases(db, account: account, bases)
        }
    }

    /// The newest queued state of each of these records (a save, sent or not), if any.
    func newestQueued(account: String, ids: [String]) throws -> [String: SyncedRecord] {
        let wanted = Set(ids)
        let cached = rows.withLock { rows in
            rows.values.filter { wanted.contains($0.recordID) && $0.record != nil }
        }
        var newest: [String: (rowID: Int64, record: SyncedRecord)] = [:]
        for row in cached where newest[row.recordID].map({ $0.rowID < row.rowID }) ?? true {
            newest[row.recordID] = (row.rowID, row.record!)
        }
        // Rows queued by an earlier process are read from the file.
        let missing = ids.filter { newest[$0] == nil }
        if !missing.isEmpty {
            try queue.read { db in
                let select = try db.cachedStatement(sql: "SELECT * FROM pending WHERE account = ? AND record_id = ? AND is_deletion = 0 ORDER BY row_id DESC LIMIT 1")
                for id in missing {
                    if let row = try Row.fetchOne(select, arguments: [account, id]), let record = row.record { newest[id] = (row.rowID, record) }
                }
            }
        }
        return newest.mapValues(\.record)
    }

    // MARK: Bases

    /// The server's last state of records, as this engine had it.
    func bases(account: String, ids: [String]) throws -> [String: SyncedRecord] {
        try queue.read { db in
            var bases: [String: SyncedRecord] = [:]
            let select = try db.cachedStatement(sql: "SELECT record FROM base WHERE account = ? AND record_id = ?")
            for id in ids {
                if let text = try String.fetchOne(select, arguments: [account, id]),
                   let record = RecordText.decode(text, id: id) {
                    bases[id] = record
                }
            }
            return bases
        }
    }

    func storeBases(account: String, _ bases: [String: SyncedRecord?]) throws {
        try queue.write { db in try Self.storeBases(db, account: account, bases) }
    }

    private static func storeBases(_ db: Database, account: String, _ bases: [String: SyncedRecord?]) throws {
        let put = try db.cachedStatement(sql: "INSERT OR REPLACE INTO base (account, record_id, record) VALUES (?, ?, ?)")
        let delete = try db.cachedStatement(sql: "DELETE FROM base WHERE account = ? AND record_id = ?")
        for (id, record) in bases {
            if let record {
                try put.execute(arguments: [account, id, RecordText.encode(record)])
            } else {
                try delete.execute(arguments: [account, id])
            }
        }
    }

    // MARK: Meta

    /// The account's writer id: random, made once, used for nothing else.
    func writer(account: String) throws -> String {
        try queue.write { db in try Self.writer(db, account: account) }
    }

    private static func writer(_ db: Database, account: String) throws -> String {
        if let writer = try meta(db, account: account, "writer") { return writer }
        let writer = "\(UUID().uuidString.lowercased())/changes"
        try setMeta(db, account: account, "writer", writer)
        return writer
    }

    func meta(account: String, _ key: String) throws -> String? {
        try queue.read { db in try Self.meta(db, account: account, key) }
    }

    func setMeta(account: String, _ key: String, _ value: String) throws {
        try queue.write { db in try Self.setMeta(db, account: account, key, value) }
    }

    private static func meta(_ db: Database, account: String, _ key: String) throws -> String? {
        try String.fetchOne(db, sql: "SELECT value FROM meta WHERE account = ? AND key = ?", arguments: [account, key])
    }

    private static func setMeta(_ db: Database, account: String, _ key: String, _ value: String) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO meta (account, key, value) VALUES (?, ?, ?)", arguments: [account, key, value])
    }
}

extension ChangeQueueStore.Row: FetchableRecord {
    init(row: GRDB.Row) throws {
        let recordID: String = row["record_id"]
        let mutationText: String? = row["mutation"]
        let recordText: String? = row["record"]
        self.init(rowID: row["row_id"], recordID: recordID, recordType: row["record_type"], isDeletion: row["is_deletion"],
                  record: recordText.flatMap { RecordText.decode($0, id: recordID) }, bytes: row["bytes"],
                  mutation: try mutationText.map { try Mutation(wire: try JSONText.parse($0), context: "a queued change") })
    }
}

/// A record as the engine's own file keeps it (on the device, in the clear):
/// `{"type", "version", "properties": {name: {"value" | "encrypted": …}}, "stamps": {name: "wall-counter-node"}}`.
enum RecordText {
    static func encode(_ record: SyncedRecord) -> String {
        var properties: JSONObject = [:]
        for (name, property) in record.properties {
            switch property {
            case .value(let value): properties[name] = .object(["value": value])
            case .encryptedValue(let value): properties[name] = .object(["encrypted": value])
            }
        }
        return JSONText.encode(.object([
            "type": .string(record.type),
            "version": .int(Int(clamping: record.metadata.version.rawValue)),
            "properties": .object(properties),
            "stamps": .object(record.metadata.stamps.mapValues { .string($0.description) }),
        ]))
    }

    static func decode(_ text: String, id: String) -> SyncedRecord? {
        guard case .object(let object)? = try? JSONText.parse(text), case .object(let stored)? = object["properties"] else { return nil }
        var properties: [String: SyncableValue] = [:]
        for (name, entry) in stored {
            if let value = entry[field: "value"] {
                properties[name] = .value(value)
            } else if let value = entry[field: "encrypted"] {
                properties[name] = .encryptedValue(value)
            }
        }
        var stamps: [String: HLCTimestamp] = [:]
        if case .object(let texts)? = object["stamps"] {
            for (name, text) in texts { if let stamp = text.stringValue.flatMap(HLCTimestamp.init) { stamps[name] = stamp } }
        }
        let version: UInt64
        if case .int(let number)? = object["version"], number >= 0 { version = UInt64(number) } else { version = 0 }
        return SyncedRecord(id: id, type: object["type"]?.stringValue ?? "", properties: properties,
                            metadata: RecordMetadata(version: Version(version), stamps: stamps))
    }
}
