import Foundation
import GRDB
import GRDBSQLite
import Synchronization
import TandemCore

/// The change-sync engine's durable state, in one SQLite file through GRDB, per account: the
/// pending changes (each saved record's state, or its deletion, until the server answers it), the
/// server's last state of each record (the base of a conflict, and of each property's stamp), the
/// writer id and next sequence of the account's mutations.
///
/// A change is on disk before ``ChangeSyncEngine/sendChanges(modify:delete:)`` returns (flushed, so
/// it survives a power loss as well as a crash), and so is a sequence before it is sent. Once
/// sent it keeps its mutation (its sequence, precondition and the document data as sent, sealed
/// properties included) until answered, so a send after a crash or a reconnect is the same write,
/// applied once.
///
/// The server's state of a record (its base) is kept as the server has it: the document's data
/// (sealed properties sealed) and version. A record the server answered is moved to it in SQL from
/// the data sent, and a fetched one is stored as the page carried it: nothing is encoded again.
final class ChangeQueueStore: Sendable {
    /// What a test hears each time a write waits for another connection's lock.
    package final class BusyWaits: Sendable {
        /// Boxed: a closure kept in a `Mutex` directly is thunked again on every access.
        private final class Hook: Sendable {
            let body: @Sendable (Int) -> Void
            init(_ body: @escaping @Sendable (Int) -> Void) { self.body = body }
        }

        private let hook = Mutex<Hook?>(nil)

        /// Calls `body` with the number of waits so far each time a write waits (nil: nothing).
        package func onWait(_ body: (@Sendable (Int) -> Void)?) {
            hook.withLock { $0 = body.map(Hook.init) }
        }

        func waited(_ attempts: Int) {
            hook.withLock { $0 }?.body(attempts)
        }
    }

    /// One stored pending change.
    struct Row: Sendable, Hashable {
        var rowID: Int64
        var recordID: String
        var recordType: String
        var isDeletion: Bool
        /// The record's state to save (nil for a deletion).
        var record: SyncedRecord?
        /// The record as stored (``RecordText``).
        var text: String?
        var bytes: Int
        /// Once sent: the sequence of its mutation id.
        var sequence: UInt64?
        /// Once sent: the document data sent, as JSON text, when it is not the stored text (the
        /// record has encrypted properties, sealed in it).
        var data: String?
        /// The version the change is based on, which its write is conditioned on (0: the record
        /// must not exist; nil: none, a deletion).
        var precondition: UInt64?
        /// Sent (or, unsent, to be sent) one by one: in a request whose mutations are decided each
        /// on its own, so a refusal is this change's own. A change sent in an atomic request is
        /// refused with the whole request when another is.
        var alone = false
        /// Once prepared by this process: its mutation, as sent.
        var mutation: Mutation?

        var isSent: Bool { sequence != nil }

        var change: ChangeSyncStateMachine.PendingChange {
            ChangeSyncStateMachine.PendingChange(recordID: recordID, isDeletion: isDeletion, bytes: bytes, isSent: isSent, rowID: rowID)
        }
    }

    /// How an answered change leaves the server's state of its record.
    enum Settlement: Sendable, Hashable {
        /// Applied: the data the change sent, at this version.
        case sent(Version)
        /// The server's state is this document data (JSON text) at this version.
        case server(Version, String)
        /// The record is not on the server.
        case gone
        /// Refused: the base stays as it was.
        case unchanged
    }

    private struct RecordKey: Hashable {
        var account: String
        var recordID: String
    }

    /// The rows queued or sent by this process and not yet answered, as read, and every pending
    /// row of the accounts whose queues were loaded whole: a send takes them from here instead of
    /// reading and decoding them again, and a record's newest queued state is found without a read.
    private struct Cache {
        /// Boxed: a row is large, and the table would move each whole on every insert and resize.
        private final class Entry: Sendable {
            let row: Row
            let account: String
            init(_ row: Row, account: String) {
                self.row = row
                self.account = account
            }
        }

        private var rows: [Int64: Entry] = [:]
        var byRecord: [RecordKey: [Int64]] = [:]
        /// Accounts whose every pending row is in `rows`.
        var complete: Set<String> = []

        /// The row, when it is in `account`'s queue: another account's row is never found for it.
        subscript(rowID: Int64, account: String) -> Row? {
            guard let entry = rows[rowID], entry.account == account else { return nil }
            return entry.row
        }

        mutating func put(_ row: Row, account: String) {
            if rows.updateValue(Entry(row, account: account), forKey: row.rowID) == nil {
                byRecord[RecordKey(account: account, recordID: row.recordID), default: []].append(row.rowID)
            }
        }

        /// Forgets an account's rows: the next read of its queue takes them from the file again.
        mutating func invalidate(_ account: String) {
            complete.remove(account)
            for (key, rowIDs) in byRecord where key.account == account {
                for rowID in rowIDs { rows.removeValue(forKey: rowID) }
                byRecord.removeValue(forKey: key)
            }
        }

        mutating func remove(_ rowID: Int64, account: String) {
            guard let row = rows.removeValue(forKey: rowID)?.row else { return }
            let key = RecordKey(account: account, recordID: row.recordID)
            byRecord[key]?.removeAll { $0 == rowID }
            if byRecord[key]?.isEmpty == true { byRecord.removeValue(forKey: key) }
        }
    }

    let queue: DatabaseQueue
    /// Read and changed only inside the queue's accesses (which run one at a time), together with
    /// the file: what is decided from it holds in the file too.
    private let cache = Mutex(Cache())

    /// A write to the account's part of the file. When it fails, the account's rows in memory are
    /// forgotten (the file is the truth), and read again when next needed.
    ///
    /// A `flushed` write is on disk before this returns (`synchronous = FULL` for its commit, which
    /// flushes every earlier commit with it): one that queues a change the app was told is queued
    /// must survive a power loss, and one that hands out sequences must never be lost after they
    /// were sent (the server would answer the next change given the same id as a replay of the
    /// first). The rest (answers settled, bases stored) the server tells again, and commits with the
    /// cheaper NORMAL.
    private func write<T>(account: String, flushed: Bool = false, _ body: (Database) throws -> T) throws -> T {
        do {
            return try queue.writeWithoutTransaction { db in try transaction(db, flushed: flushed, body) }
        } catch {
            cache.withLock { $0.invalidate(account) }
            throw error
        }
    }

    private func transaction<T>(_ db: Database, flushed: Bool, _ body: (Database) throws -> T) throws -> T {
        if flushed { try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() }
        defer { if flushed { try? db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() } }
        var result: T?
        // Immediate: the file's write lock is taken at the start (waiting up to the busy
        // timeout while another connection holds it), never upgraded from a read midway, which
        // another writer could refuse at once.
        try db.inTransaction(.immediate) {
            result = try body(db)
            return .commit
        }
        if flushed { flushedCommits.add(1, ordering: .relaxed) }
        return result!
    }

    /// Commits flushed to disk because they queued changes or handed out sequences (for tests).
    package let flushedCommits = Atomic<Int>(0)

    /// Told each time a write finds the file locked by another connection and waits (tests).
    package let busyWaits = BusyWaits()

    /// Opens (creating if needed) the file at `path`. A write that finds the file locked by
    /// another connection (a second engine of the same zone, another process) waits for it, up
    /// to `busyTimeout`, before it fails.
    init(path: String, busyTimeout: Duration = .seconds(5)) throws {
        var configuration = Configuration()
        configuration.journalMode = .wal
        let hook = busyWaits
        let limit = Double(busyTimeout.components.seconds) + Double(busyTimeout.components.attoseconds) / 1e18
        configuration.busyMode = .callback { attempts in
            // SQLite's own sleeps (1 ms, growing to 100 ms), up to the timeout in all.
            let delays: [Double] = [0.001, 0.002, 0.005, 0.010, 0.015, 0.020, 0.025, 0.025, 0.025, 0.050, 0.050, 0.100]
            let waited = attempts < delays.count ? delays[..<attempts].reduce(0, +) : delays.reduce(0, +) + Double(attempts - delays.count) * 0.1
            let delay = delays[min(attempts, delays.count - 1)]
            guard waited + delay <= limit else { return false }
            hook.waited(attempts)
            usleep(UInt32(delay * 1_000_000))
            return true
        }
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
        // A sent change keeps its sequence, precondition and data in columns instead of its whole
        // mutation as JSON; one unsent change per record is an index (a change queued again
        // replaces it in one statement), and the only one: the queue holds only what is not yet
        // answered, and is read whole, so the other two cost every change more than they saved;
        // a base is the server's document data and version.
        migrator.registerMigration("v2") { db in
            try db.execute(sql: """
                ALTER TABLE pending ADD COLUMN sequence INTEGER;
                ALTER TABLE pending ADD COLUMN data TEXT;
                ALTER TABLE pending ADD COLUMN precondition INTEGER;
                ALTER TABLE pending ADD COLUMN alone INTEGER NOT NULL DEFAULT 0;
                """)
            // Each record's text in the new form, with its version apart; each sent change's
            // mutation as its sequence, precondition and data.
            for row in try GRDB.Row.fetchAll(db, sql: "SELECT row_id, record_id, record, mutation FROM pending") {
                let rowID: Int64 = row["row_id"]
                let recordText: String? = row["record"]
                let record = recordText.flatMap { RecordText.decodeFirstSchema($0, id: row["record_id"]) }
                var precondition = record?.metadata.version.rawValue
                var sequence: UInt64?
                var data: String?
                if let text = row["mutation"] as String? {
                    let mutation = try Mutation(wire: try JSONText.parse(text), context: "a queued change")
                    sequence = mutation.id?.sequence
                    if case .set(let fields) = mutation.kind { data = JSONText.encode(.object(fields)) }
                    switch mutation.precondition {
                    case .version(let version)?: precondition = version.rawValue
                    case .exists(false)?: precondition = 0
                    default: precondition = nil
                    }
                }
                try db.execute(sql: "UPDATE pending SET record = ?, sequence = ?, data = ?, precondition = ? WHERE row_id = ?",
                               arguments: [record.map(RecordText.encode), sequence, data, precondition, rowID])
            }
            // Bases were the engine's own encoding, in the clear: they cannot be sealed again here
            // (no key), so they are dropped; the next fetch from the beginning, or the next answer
            // to a send, stores each again. Until then a conflict has no base.
            try db.execute(sql: """
                ALTER TABLE pending DROP COLUMN mutation;
                DROP INDEX pending_by_account;
                DROP INDEX pending_by_record;
                CREATE UNIQUE INDEX pending_unsent ON pending (account, record_id) WHERE sequence IS NULL;
                DROP TABLE base;
                CREATE TABLE base (
                    account TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    data TEXT NOT NULL,
                    PRIMARY KEY (account, record_id)
                ) WITHOUT ROWID;
                """)
        }
        return migrator
    }

    // MARK: Pending changes

    /// The account's pending changes, in order. A record with a change sent and not answered and a
    /// newer one has both, the sent one first.
    func pending(account: String) throws -> [Row] {
        // Sent changes first, in the order of their sequences (which is not always their rows'
        // order: a conflict's resolution goes ahead of changes queued before it), then the others.
        try queue.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM pending WHERE account = ? ORDER BY sequence IS NULL, sequence, row_id", arguments: [account])
            cache.withLock { cache in
                for row in rows where cache[row.rowID, account] == nil { cache.put(row, account: account) }
                cache.complete.insert(account)
            }
            return rows
        }
    }

    /// Queues changes, durably: a record's change not yet sent is replaced in place; otherwise the
    /// change joins the end. Returns them as queued (with their rows).
    ///
    /// `keepingNewer`: a record with a change not yet sent keeps it, and the one given is dropped
    /// (a conflict's resolution of an older change, when the app has changed the record since).
    func enqueue(account: String, saves: [SyncedRecord], deletions: [(id: String, type: String)], keepingNewer: Bool = false) throws -> [Row] {
        try write(account: account, flushed: true) { db in
            try enqueue(db, account: account, saves: saves, deletions: deletions, keepingNewer: keepingNewer)
        }
    }

    /// ``enqueue(account:saves:deletions:keepingNewer:)`` inside a write.
    private func enqueue(_ db: Database, account: String, saves: [SyncedRecord], deletions: [(id: String, type: String)], keepingNewer: Bool) throws -> [Row] {
        // With the account's whole queue in memory, a record's unsent change is found there, and
        // replaced by its row; otherwise the file finds it (the upsert).
        let unsent = cache.withLock { cache -> [String: Int64]? in
            guard cache.complete.contains(account) else { return nil }
            var unsent: [String: Int64] = [:]
            for id in saves.lazy.map(\.id) + deletions.lazy.map(\.id) {
                for rowID in cache.byRecord[RecordKey(account: account, recordID: id)] ?? [] where cache[rowID, account]?.isSent == false {
                    unsent[id] = rowID
                }
            }
            return unsent
        }
        let findUnsent = try db.cachedStatement(sql: "SELECT row_id FROM pending WHERE account = ? AND record_id = ? AND sequence IS NULL")
        let upsert = try db.cachedStatement(sql: """
            INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes, precondition) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (account, record_id) WHERE sequence IS NULL
            DO UPDATE SET record_type = excluded.record_type, is_deletion = excluded.is_deletion, record = excluded.record, bytes = excluded.bytes,
                precondition = excluded.precondition
            RETURNING row_id
            """)
        let replace = try db.cachedStatement(sql: "UPDATE pending SET record_type = ?, is_deletion = ?, record = ?, bytes = ?, precondition = ? WHERE row_id = ? AND sequence IS NULL")
        var replaced: [String: Int64] = [:]
        var rows: [Row] = []
        rows.reserveCapacity(saves.count + deletions.count)
        // New changes wait to be inserted together, up to 64 to a statement (one statement a
        // row cost the app's thread more than the rest of the call).
        var waiting: [Waiting] = []
        var waitingIDs: Set<String> = []
        func flush() throws {
            guard !waiting.isEmpty else { return }
            let statement = try db.cachedStatement(sql: "INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes, precondition) VALUES "
                + repeatElement("(?, ?, ?, ?, ?, ?, ?)", count: waiting.count).joined(separator: ", ") + " RETURNING row_id, record_id")
            let given = try Self.insert(waiting, account: account, with: statement)
            for entry in waiting {
                guard let rowID = given[entry.id] else {
                    throw TandemError(.internal, "The engine's file gave no row for the change of record '\(entry.id)'.")
                }
                rows[entry.index].rowID = rowID
                replaced[entry.id] = rowID
            }
            waiting = []
            waitingIDs = []
        }
        func row(id: String, type: String, record: SyncedRecord?, text: String?, bytes: Int) throws -> Row {
            var rowID: Int64 = 0
            let precondition = record.map { Int64(clamping: $0.metadata.version.rawValue) }
            if let unsent {
                // The same record twice in one call: the second replaces the first, which
                // needs its row first.
                if waitingIDs.contains(id) { try flush() }
                if let existing = replaced[id] ?? unsent[id] {
                    try replace.execute(arguments: [type, record == nil, text, bytes, precondition, existing])
                    guard db.changesCount == 1 else {
                        throw TandemError(.internal, "The engine's file no longer had the unsent change of record '\(id)' it was to replace.")
                    }
                    rowID = existing
                    replaced[id] = rowID
                } else {
                    // Its row comes with the others' (`flush`).
                    waiting.append(Waiting(index: rows.count, id: id, type: type, isDeletion: record == nil, text: text, bytes: bytes, precondition: precondition))
                    waitingIDs.insert(id)
                }
            } else {
                guard let returned = try Int64.fetchOne(upsert, arguments: [account, id, type, record == nil, text, bytes, precondition]) else {
                    throw TandemError(.internal, "The engine's file gave no row for the change of record '\(id)'.")
                }
                rowID = returned
            }
            return Row(rowID: rowID, recordID: id, recordType: type, isDeletion: record == nil, record: record, text: text, bytes: bytes,
                       precondition: record?.metadata.version.rawValue)
        }
        for record in saves {
            if keepingNewer {
                let queued = try unsent.map { $0[record.id] } ?? Int64.fetchOne(findUnsent, arguments: [account, record.id])
                if queued != nil { continue }
            }
            let text = RecordText.encode(record)
            rows.append(try row(id: record.id, type: record.type, record: record, text: text, bytes: text.utf8.count + record.id.utf8.count))
            if waiting.count == 64 { try flush() }
        }
        for deletion in deletions {
            rows.append(try row(id: deletion.id, type: deletion.type, record: nil, text: nil, bytes: deletion.id.utf8.count + 64))
            if waiting.count == 64 { try flush() }
        }
        try flush()
        cache.withLock { cache in for row in rows { cache.put(row, account: account) } }
        return rows
    }

    /// A new change waiting to be inserted with others (`enqueue`): `index` is its place among
    /// the rows returned.
    private struct Waiting {
        var index: Int
        var id: String
        var type: String
        var isDeletion: Bool
        /// The stored record (nil for a deletion).
        var text: String?
        var bytes: Int
        var precondition: Int64?
    }

    /// Runs one insert of `waiting` rows, bound through SQLite's C API (GRDB's arguments, built
    /// for seven values a row, cost the app's thread more than the insert), and returns the row
    /// id it gave each record.
    private static func insert(_ waiting: [Waiting], account: String, with statement: Statement) throws -> [String: Int64] {
        let handle = statement.sqliteStatement
        // Every value is bound before the one step: SQLite keeps its own copies (SQLITE_TRANSIENT).
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        func check(_ code: Int32) throws {
            guard code != SQLITE_OK && code != SQLITE_DONE && code != SQLITE_ROW else { return }
            let message = sqlite3_errmsg(sqlite3_db_handle(handle)).map { String(cString: $0) }
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
        }
        func bind(_ text: String, at index: Int32) throws {
            var text = text
            try text.withUTF8 { try check(sqlite3_bind_text(handle, index, $0.baseAddress, Int32($0.count), transient)) }
        }
        sqlite3_reset(handle)
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        for (offset, entry) in waiting.enumerated() {
            let first = Int32(offset * 7 + 1)
            try bind(account, at: first)
            try bind(entry.id, at: first + 1)
            try bind(entry.type, at: first + 2)
            try check(sqlite3_bind_int64(handle, first + 3, entry.isDeletion ? 1 : 0))
            if let text = entry.text { try bind(text, at: first + 4) } else { try check(sqlite3_bind_null(handle, first + 4)) }
            try check(sqlite3_bind_int64(handle, first + 5, Int64(entry.bytes)))
            if let precondition = entry.precondition { try check(sqlite3_bind_int64(handle, first + 6, precondition)) } else { try check(sqlite3_bind_null(handle, first + 6)) }
        }
        var given: [String: Int64] = [:]
        given.reserveCapacity(waiting.count)
        while true {
            let code = sqlite3_step(handle)
            guard code == SQLITE_ROW else {
                try check(code)
                break
            }
            let rowID = sqlite3_column_int64(handle, 0)
            guard let bytes = sqlite3_column_text(handle, 1) else { continue }
            given[String(cString: bytes)] = rowID
        }
        return given
    }

    /// The rows of a batch about to be sent, each with its mutation, for records at `records`:
    /// those sent before are sent again as they went; the others get their mutation now (the next
    /// sequences in order, the document data `fields` gives, conditioned on the version the record
    /// was based on), stored before anything is sent.
    func prepare(account: String, records: CollectionPath, rowIDs: [Int64], fields: (Row) throws -> JSONObject) throws -> [Row] {
        try write(account: account, flushed: true) { db in
            let known = cache.withLock { cache in rowIDs.map { cache[$0, account] } }
            let writer = try Self.writer(db, account: account)
            var next = try UInt64(Self.meta(db, account: account, "next_sequence") ?? "1") ?? 1
            var rows: [Row] = []
            rows.reserveCapacity(rowIDs.count)
            let select = try db.cachedStatement(sql: "SELECT * FROM pending WHERE row_id = ? AND account = ?")
            // Only the account's own rows: another account's are never numbered under its writer.
            let update = try db.cachedStatement(sql: "UPDATE pending SET sequence = ?, data = ?, alone = ? WHERE row_id = ? AND account = ?")
            let number = try db.cachedStatement(sql: "UPDATE pending SET sequence = ?, alone = ? WHERE row_id = ? AND account = ?")
            var batch: [Row] = []
            for (rowID, known) in zip(rowIDs, known) {
                if let row = try known ?? Row.fetchOne(select, arguments: [rowID, account]) { batch.append(row) }
            }
            // A batch with a change to send one by one goes one by one; its new mutations are
            // sent so from the first time.
            let alone = batch.contains { $0.alone }
            for var row in batch {
                let rowID = row.rowID
                if row.sequence == nil {
                    row.alone = alone
                    row.sequence = next
                    next += 1
                    let id = MutationID(clientID: writer, sequence: next - 1)
                    let path = try records.document(row.recordID)
                    if row.isDeletion {
                        row.mutation = Mutation(path: path, kind: .delete, id: id)
                    } else {
                        let data = try fields(row)
                        // A record with sealed properties is sent as its sealed data, kept apart;
                        // any other as the text it is stored as.
                        if let record = row.record, let text = row.text, RecordText.isSentAsKept(record) {
                            row.data = nil
                            row.mutation = Self.save(data, text: text, at: path, precondition: row.precondition, id: id)
                        } else {
                            var text = WireWriter(capacity: row.bytes + 64)
                            text.value(.object(data))
                            row.data = text.text
                            row.mutation = Self.save(data, text: text.text, at: path, precondition: row.precondition, id: id)
                        }
                    }
                    if row.data == nil {
                        // Nearly every change: only its sequence is stored.
                        try number.execute(arguments: [row.sequence, row.alone, rowID, account])
                    } else {
                        try update.execute(arguments: [row.sequence, row.data, row.alone, rowID, account])
                    }
                } else if row.mutation == nil {
                    // Sent by an earlier process: sent again as it went.
                    row.mutation = try Self.mutation(of: row, writer: writer, records: records)
                }
                rows.append(row)
            }
            try Self.setMeta(db, account: account, "next_sequence", String(next))
            cache.withLock { cache in for row in rows { cache.put(row, account: account) } }
            return rows
        }
    }

    /// A sent row's mutation, from what the file keeps of it.
    private static func mutation(of row: Row, writer: String, records: CollectionPath) throws -> Mutation {
        let path = try records.document(row.recordID)
        let id = MutationID(clientID: writer, sequence: row.sequence ?? 0)
        if row.isDeletion { return Mutation(path: path, kind: .delete, id: id) }
        guard let text = row.data ?? row.text, case .object(var fields)? = try? JSONText.parse(text) else {
            throw TandemError(.dataLoss, "The sent change of record '\(row.recordID)' cannot be read from the engine's file; it cannot be sent again as it went. Send the record again.")
        }
        guard row.data != nil || fields[RecordText.clear] == nil else {
            throw TandemError(.dataLoss, "The sent change of record '\(row.recordID)' lost its sealed data in the engine's file; it cannot be sent again as it went. Send the record again.")
        }
        fields.removeValue(forKey: RecordText.clear)
        return save(fields, text: text, at: path, precondition: row.precondition, id: id)
    }

    /// A save of `fields` (spelled `text`) conditioned on the version it is based on.
    private static func save(_ fields: JSONObject, text: String, at path: DocumentPath, precondition: UInt64?, id: MutationID) -> Mutation {
        let version = precondition ?? 0
        var mutation = Mutation(path: path, kind: .set(fields), precondition: version > 0 ? .version(Version(version)) : .exists(false), id: id)
        mutation.encodedData = text
        return mutation
    }

    /// Sent changes an atomic request's refusal left undecided for good (their ids refused with
    /// the request): each goes back to the queue unsent, to be sent again one by one under a new
    /// id, unless the record has a newer change queued, which replaces it. Returns those kept.
    func unprepare(account: String, rowIDs: [Int64]) throws -> [Row] {
        try write(account: account) { db in try unprepare(db, account: account, rowIDs: rowIDs) }
    }

    /// ``unprepare(account:rowIDs:)`` inside a write.
    private func unprepare(_ db: Database, account: String, rowIDs: [Int64]) throws -> [Row] {
        let select = try db.cachedStatement(sql: "SELECT * FROM pending WHERE row_id = ? AND account = ?")
        // Whether the record has a change not yet sent, beside this one: the file decides.
        let newer = try db.cachedStatement(sql: "SELECT 1 FROM pending WHERE account = ? AND record_id = ? AND sequence IS NULL AND row_id != ?")
        let reset = try db.cachedStatement(sql: "UPDATE pending SET sequence = NULL, data = NULL, alone = 1 WHERE row_id = ? AND account = ?")
        let delete = try db.cachedStatement(sql: "DELETE FROM pending WHERE row_id = ? AND account = ?")
        var kept: [Row] = []
        var dropped: [Int64] = []
        for rowID in rowIDs {
            guard var row = try cache.withLock({ $0[rowID, account] }) ?? Row.fetchOne(select, arguments: [rowID, account]) else { continue }
            if try Bool.fetchOne(newer, arguments: [account, row.recordID, rowID]) != nil {
                try delete.execute(arguments: [rowID, account])
                dropped.append(rowID)
                continue
            }
            try reset.execute(arguments: [rowID, account])
            row.sequence = nil
            row.data = nil
            row.mutation = nil
            row.alone = true
            kept.append(row)
        }
        cache.withLock { cache in
            for rowID in dropped { cache.remove(rowID, account: account) }
            for row in kept {
                cache.remove(row.rowID, account: account)
                cache.put(row, account: account)
            }
        }
        return kept
    }

    /// Removes answered changes, in order, and sets the server's state of the records they left.
    /// Runs of applied saves (nearly every answer) move to their bases, and the changes leave the
    /// queue, in a statement each, over a JSON list of rows and versions (the list the outer loop,
    /// `CROSS JOIN`, each row found by its id: never a scan of the queue per entry).
    func settle(account: String, _ answered: [(rowID: Int64, settlement: Settlement)]) throws {
        try write(account: account) { db in try self.settle(db, account: account, answered) }
    }

    /// Settles answered changes (``settle(account:_:)``), puts back those an atomic refusal left
    /// undecided (``unprepare(account:rowIDs:)``) and queues conflicts' resolutions (``enqueue(account:saves:deletions:keepingNewer:)``,
    /// keeping newer changes), in one transaction, flushed when it queues: a crash never leaves a
    /// conflicted change settled with its resolution not yet queued. Returns the changes put back
    /// and those queued.
    func settle(account: String, _ answered: [(rowID: Int64, settlement: Settlement)], undecided: [Int64], requeue: [SyncedRecord]) throws -> (again: [Row], requeued: [Row]) {
        try write(account: account, flushed: !requeue.isEmpty) { db in
            try self.settle(db, account: account, answered)
            let again = undecided.isEmpty ? [] : try self.unprepare(db, account: account, rowIDs: undecided)
            let requeued = requeue.isEmpty ? [] : try self.enqueue(db, account: account, saves: requeue, deletions: [], keepingNewer: true)
            return (again, requeued)
        }
    }

    /// ``settle(account:_:)`` inside a write.
    private func settle(_ db: Database, account: String, _ answered: [(rowID: Int64, settlement: Settlement)]) throws {
        let sent = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO base (account, record_id, version, data)
            SELECT p.account, p.record_id, j.value ->> 1, coalesce(p.data, p.record) FROM json_each(?) AS j CROSS JOIN pending AS p ON p.row_id = j.value ->> 0
            WHERE p.account = ? AND p.is_deletion = 0 ORDER BY j.key
            """)
        let removeBase = try db.cachedStatement(sql: "DELETE FROM base WHERE account = ? AND record_id = (SELECT record_id FROM pending WHERE row_id = ?)")
        let putBase = try db.cachedStatement(sql: "INSERT OR REPLACE INTO base (account, record_id, version, data) SELECT account, record_id, ?, ? FROM pending WHERE row_id = ?")
        let delete = try db.cachedStatement(sql: "DELETE FROM pending WHERE account = ? AND row_id IN (SELECT value FROM json_each(?))")
        var run = WireWriter(capacity: 32 * answered.count)
        var runCount = 0
        func flush() throws {
            guard runCount > 0 else { return }
            run.raw("]")
            try sent.execute(arguments: [run.text, account])
            run = WireWriter(capacity: 32 * answered.count)
            runCount = 0
        }
        for (rowID, settlement) in answered {
            if case .sent(let version) = settlement {
                run.raw(runCount == 0 ? "[[" : ",[")
                run.int(Int(rowID))
                run.raw(",")
                run.int(Int(clamping: version.rawValue))
                run.raw("]")
                runCount += 1
                continue
            }
            try flush()
            switch settlement {
            case .server(let version, let data): try putBase.execute(arguments: [Int64(clamping: version.rawValue), data, rowID])
            case .gone: try removeBase.execute(arguments: [account, rowID])
            case .sent, .unchanged: break
            }
        }
        try flush()
        var rowIDs = WireWriter(capacity: 12 * answered.count)
        rowIDs.raw("[")
        for (index, (rowID, _)) in answered.enumerated() {
            if index > 0 { rowIDs.raw(",") }
            rowIDs.int(Int(rowID))
        }
        rowIDs.raw("]")
        try delete.execute(arguments: [account, rowIDs.text])
        cache.withLock { cache in for (rowID, _) in answered { cache.remove(rowID, account: account) } }
    }

    /// The newest queued state of each of these records (a save, sent or not), if any.
    func newestQueued(account: String, ids: [String]) throws -> [String: SyncedRecord] {
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
        try write(account: account) { db in try Self.setMeta(db, account: account, key, value) }
    }

    private static func meta(_ db: Database, account: String, _ key: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE account = ? AND key = ?"), arguments: [account, key])
    }

    private static func setMeta(_ db: Database, account: String, _ key: String, _ value: String) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (account, key, value) VALUES (?, ?, ?)").execute(arguments: [account, key, value])
    }
}

extension ChangeQueueStore.Row: FetchableRecord {
    init(row: GRDB.Row) throws {
        let recordID: String = row["record_id"]
        let recordText: String? = row["record"]
        let sequence: Int64? = row["sequence"]
        let precondition = (row["precondition"] as Int64?).map { UInt64(max(0, $0)) }
        self.init(rowID: row["row_id"], recordID: recordID, recordType: row["record_type"], isDeletion: row["is_deletion"],
                  record: recordText.flatMap { RecordText.decode($0, id: recordID, version: Version(precondition ?? 0)) }, text: recordText, bytes: row["bytes"],
                  sequence: sequence.map { UInt64(max(0, $0)) }, data: row["data"], precondition: precondition, alone: row["alone"])
    }
}

/// A record as the engine's queue keeps it: the document it is sent as, its encrypted properties
/// in the clear under `_clear` (the file stays on the device). A record with none is kept as the
/// exact text that is sent, so sending it encodes nothing again. Its version is kept apart (the
/// `precondition` column), as the document has none.
enum RecordText {
    static let clear = "_clear"

    static func encode(_ record: SyncedRecord) -> String {
        var writer = WireWriter(capacity: 96 + record.properties.count * 48)
        writer.raw(#"{"_type":"#)
        writer.string(record.type)
        var clear: [(String, JSONValue)] = []
        for (name, property) in record.properties {
            switch property {
            case .value(let value):
                writer.raw(",")
                writer.string(name)
                writer.raw(":")
                writer.value(value)
            case .encryptedValue(let value):
                clear.append((name, value))
            }
        }
        if !clear.isEmpty {
            writer.raw(#","_clear":{"#)
            for (index, (name, value)) in clear.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(name)
                writer.raw(":")
                writer.value(value)
            }
            writer.raw("}")
        }
        if !record.metadata.stamps.isEmpty {
            writer.raw(#","_stamps":{"#)
            var first = true
            for (name, stamp) in record.metadata.stamps {
                if !first { writer.raw(",") }
                first = false
                writer.string(name)
                writer.raw(":")
                Self.write(stamp, to: &writer)
            }
            writer.raw("}")
        }
        writer.raw("}")
        return writer.text
    }

    /// A stamp as its description, in quotes, without building that string first when its node
    /// needs no escaping (a client id nearly always).
    static func write(_ stamp: HLCTimestamp, to writer: inout WireWriter) {
        guard stamp.node.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x80 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else {
            writer.string(stamp.description)
            return
        }
        writer.raw("\"")
        writer.int(Int(stamp.wallMilliseconds))
        writer.raw("-")
        writer.int(Int(stamp.counter))
        writer.raw("-")
        writer.raw(unescaped: stamp.node)
        writer.raw("\"")
    }

    static func decode(_ text: String, id: String, version: Version) -> SyncedRecord? {
        guard case .object(var fields)? = try? JSONText.parse(text) else { return nil }
        let clear = fields.removeValue(forKey: clear)
        guard var record = try? RecordCoding.record(id: id, fields: fields, version: version, encryption: nil) else { return nil }
        if case .object(let values)? = clear {
            for (name, value) in values { record.properties[name] = .encryptedValue(value) }
        }
        return record
    }

    /// Whether a record is kept as the text it is sent as (it has no encrypted property).
    static func isSentAsKept(_ record: SyncedRecord) -> Bool {
        !record.properties.values.contains { $0.isEncrypted }
    }

    /// A record as the first schema kept it: `{"type", "version", "properties": {name: {"value" |
    /// "encrypted": …}}, "stamps": {name: "wall-counter-node"}}`.
    static func decodeFirstSchema(_ text: String, id: String) -> SyncedRecord? {
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
