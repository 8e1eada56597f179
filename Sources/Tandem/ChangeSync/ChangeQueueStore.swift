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
/// A change is on disk before ``ChangeSyncEngine/sendChanges(modify:delete:)-([SyncedRecord],_)`` returns (flushed, so
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

    struct RecordKey: Hashable {
        var account: String
        var recordID: String
    }

    /// The rows queued or sent by this process and not yet answered, as read, and every pending
    /// row of the accounts whose queues were loaded whole: a send takes them from here instead of
    /// reading and decoding them again, and a record's newest queued state is found without a read.
    struct Cache {
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
        /// The file's `data_version` when this connection last looked: another connection's
        /// commit changes it.
        var dataVersion: Int64?

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

        /// Forgets every row: the file changed under another connection.
        mutating func invalidateAll() {
            rows = [:]
            byRecord = [:]
            complete = []
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
    let cache = Mutex(Cache())

    /// A write to the account's part of the file. When it fails, the account's rows in memory are
    /// forgotten (the file is the truth), and read again when next needed.
    ///
    /// A `flushed` write is on disk before this returns (`synchronous = FULL` for its commit, which
    /// flushes every earlier commit with it): one that queues a change the app was told is queued
    /// must survive a power loss, and one that hands out sequences must never be lost after they
    /// were sent (the server would answer the next change given the same id as a replay of the
    /// first). The rest (answers settled, bases stored) the server tells again, and commits with the
    /// cheaper NORMAL.
    func write<T>(account: String, flushed: Bool = false, _ body: (Database) throws -> T) throws -> T {
        do {
            return try queue.writeWithoutTransaction { db in try transaction(db, flushed: flushed, body) }
        } catch {
            cache.withLock { $0.invalidate(account) }
            throw error
        }
    }

    func transaction<T>(_ db: Database, flushed: Bool, _ body: (Database) throws -> T) throws -> T {
        if flushed { try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() }
        defer { if flushed { try? db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() } }
        var result: T?
        // Immediate: the file's write lock is taken at the start (waiting up to the busy
        // timeout while another connection holds it), never upgraded from a read midway, which
        // another writer could refuse at once.
        try db.inTransaction(.immediate) {
            try syncCache(db)
            result = try body(db)
            return .commit
        }
        if flushed { flushedCommits.add(1, ordering: .relaxed) }
        return result!
    }

    /// Forgets the rows kept in memory when another connection committed to the file since this
    /// one last looked (a second engine of the zone, another process): they may have changed
    /// there (a record queued again replaces its unsent change in place), and a row sent as
    /// remembered would send a state the app replaced. Called at the start of each access that
    /// reads the rows in memory.
    func syncCache(_ db: Database) throws {
        let version = try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA data_version")) ?? 0
        cache.withLock { cache in
            if cache.dataVersion != version {
                if cache.dataVersion != nil { cache.invalidateAll() }
                cache.dataVersion = version
            }
        }
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
            try syncCache(db)
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
    func enqueue(_ db: Database, account: String, saves: [SyncedRecord], deletions: [(id: String, type: String)], keepingNewer: Bool) throws -> [Row] {
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
    struct Waiting {
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
    static func insert(_ waiting: [Waiting], account: String, with statement: Statement) throws -> [String: Int64] {
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
}
