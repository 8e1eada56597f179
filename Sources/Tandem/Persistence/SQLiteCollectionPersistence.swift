import Foundation
import GRDB
import GRDBSQLite
import Synchronization
import TandemCore

/// Keeps collection engines' state in one SQLite database in WAL mode, through GRDB: documents,
/// outbox entries and each engine's client id, next sequence number and resume version, each keyed
/// by manager key. Every ``apply(_:)`` is one transaction, so a cached write and its outbox entry
/// commit together or not at all.
///
/// Each engine's documents live in one of two slots. A large snapshot is written into the other
/// slot piece by piece while it arrives, and its last piece swaps the slots in one short
/// transaction: until then the cache is the old one, whole.
///
/// ```swift
/// let persistence = try SQLiteCollectionPersistence(managerKey: "products")  // …/tandem/collections.sqlite
/// ```
public final class SQLiteCollectionPersistence: LocalCollectionPersistence, SnapshotStaging {
    /// The key this engine's rows are stored under: its manager key, or for a signed-in user's space,
    /// that key with the user after it.
    public let managerKey: String
    let pool: DatabasePool
    /// The snapshot whose documents the other slot holds, if any: only it may be swapped in.
    private let staging = Mutex<Int?>(nil)

    /// Opens (creating if needed) `collections.sqlite` in `directory`, default
    /// ``LocalStorageLocation/defaultDirectory``. Engines in one process share one connection pool per file.
    public convenience init(managerKey: String, directory: URL? = nil) throws {
        let directory = directory ?? LocalStorageLocation.defaultDirectory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("collections.sqlite").path
        try self.init(managerKey: managerKey, pool: Self.sharedPool(at: path))
    }

    /// Uses an open pool; the schema is created if missing.
    public init(managerKey: String, pool: DatabasePool) throws {
        self.managerKey = managerKey
        self.pool = pool
        try Self.migrator.migrate(pool)
    }

    private static let pools = Mutex<[String: DatabasePool]>([:])

    static func sharedPool(at path: String) throws -> DatabasePool {
        try pools.withLock { pools in
            if let pool = pools[path] { return pool }
            let pool = try DatabasePool(path: path)
            pools[path] = pool
            return pool
        }
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE engine_state (
                    manager_key TEXT PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL,
                    next_sequence INTEGER NOT NULL,
                    resume_version INTEGER
                );
                CREATE TABLE document (
                    manager_key TEXT NOT NULL,
                    path TEXT NOT NULL,
                    data TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    create_time REAL NOT NULL,
                    update_time REAL NOT NULL,
                    PRIMARY KEY (manager_key, path)
                ) WITHOUT ROWID;
                CREATE TABLE outbox (
                    manager_key TEXT NOT NULL,
                    sequence INTEGER NOT NULL,
                    mutation TEXT NOT NULL,
                    attempts INTEGER NOT NULL,
                    PRIMARY KEY (manager_key, sequence)
                ) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v2: document slots") { db in
            // Two slots per engine: a snapshot is staged in the one not in use, then swapped in.
            try db.execute(sql: """
                CREATE TABLE document_in_slots (
                    manager_key TEXT NOT NULL,
                    slot INTEGER NOT NULL,
                    path TEXT NOT NULL,
                    data TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    create_time REAL NOT NULL,
                    update_time REAL NOT NULL,
                    PRIMARY KEY (manager_key, slot, path)
                ) WITHOUT ROWID;
                INSERT INTO document_in_slots (manager_key, slot, path, data, version, create_time, update_time)
                    SELECT manager_key, 0, path, data, version, create_time, update_time FROM document;
                DROP TABLE document;
                ALTER TABLE document_in_slots RENAME TO document;
                ALTER TABLE engine_state ADD COLUMN document_slot INTEGER NOT NULL DEFAULT 0;
                """)
        }
        migrator.registerMigration("v3: outbox batches") { db in
            // The first sequence of the atomic batch an entry belongs to; null for a write of its own.
            try db.execute(sql: "ALTER TABLE outbox ADD COLUMN batch INTEGER")
        }
        migrator.registerMigration("v4: spaces") { db in
            // Whose space each engine showed last; a user's space is the rows of its own key.
            try db.execute(sql: "CREATE TABLE engine_user (manager_key TEXT PRIMARY KEY NOT NULL, user TEXT) WITHOUT ROWID")
            // The query the resume version belongs to, so a relaunch with the same query resumes.
            try db.execute(sql: "ALTER TABLE engine_state ADD COLUMN resume_query TEXT")
        }
        return migrator
    }

    public func load() throws -> LocalCollectionState? {
        try pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT client_id, next_sequence, resume_version, resume_query, document_slot FROM engine_state WHERE manager_key = ?", arguments: [managerKey]) else {
                return nil
            }
            let clientID: String = row["client_id"]
            let nextSequence: Int64 = row["next_sequence"]
            let resume: Int64? = row["resume_version"]
            let slot: Int64 = row["document_slot"]

            // In path order (the table is clustered by it), so the engine rarely needs to sort.
            // The rows are read first; their JSON is parsed after, on two cores for a large cache.
            var rows: [StoredDocument] = []
            let cursor = try Row.fetchCursor(db, sql: "SELECT path, data, version, create_time, update_time FROM document WHERE manager_key = ? AND slot = ? ORDER BY path", arguments: [managerKey, slot])
            while let row = try cursor.next() {
                rows.append(StoredDocument(row))
            }
            let documents = try Self.documents(from: rows)

            var entries: [PendingWrite] = []
            let outboxCursor = try Row.fetchCursor(db, sql: "SELECT sequence, mutation, attempts, batch FROM outbox WHERE manager_key = ? ORDER BY sequence", arguments: [managerKey])
            while let row = try outboxCursor.next() {
                let text: String = row["mutation"]
                let mutation = try Self.mutation(fromStored: text)
                let sequence: Int64 = row["sequence"]
                let batch: Int64? = row["batch"]
                entries.append(PendingWrite(
                    id: MutationID(clientID: clientID, sequence: UInt64(sequence)), mutation: mutation, attempts: row["attempts"],
                    batch: batch.map { UInt64($0) }))
            }
            let outbox = Outbox(clientID: clientID, entries: entries, nextSequence: UInt64(nextSequence))
            return LocalCollectionState(documents: documents, outbox: outbox, resumeVersion: resume.map { Version(UInt64($0)) }, resumeQuery: row["resume_query"])
        }
    }

    /// A stored outbox entry's mutation: in its wire form (what the server is sent, read by the
    /// same parser as the server's), or as an earlier version stored it (`Codable`).
    static func mutation(fromStored text: String) throws -> Mutation {
        do {
            let value = try JSONText.parse(text)
            if case .object(let object) = value, object["op"] != nil, let mutation = try? Mutation(wire: value) {
                return mutation
            }
            return try JSONValueDecoder().decode(Mutation.self, from: value)
        } catch {
            throw TandemError(.dataLoss, "A queued write in the cache is damaged (\((error as? TandemError)?.message ?? "\(error)")); clear this engine's cache, which drops its queued writes.")
        }
    }

    public func space(for user: String) throws -> any LocalCollectionPersistence {
        try SQLiteCollectionPersistence(managerKey: spaceKey(managerKey, user: user), pool: pool)
    }

    public func lastUser() throws -> String? {
        try pool.read { db in
            try String?.fetchOne(db, sql: "SELECT user FROM engine_user WHERE manager_key = ?", arguments: [managerKey]) ?? nil
        }
    }

    public func setLastUser(_ user: String?) throws {
        try pool.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO engine_user (manager_key, user) VALUES (?, ?)", arguments: [managerKey, user])
        }
    }

    public func create(clientID: String) throws -> LocalCollectionState {
        try pool.write { db in
            staging.withLock { $0 = nil }
            try db.execute(sql: "DELETE FROM document WHERE manager_key = ?", arguments: [managerKey])
            try db.execute(sql: "DELETE FROM outbox WHERE manager_key = ?", arguments: [managerKey])
            try db.execute(
                sql: "INSERT OR REPLACE INTO engine_state (manager_key, client_id, next_sequence, resume_version, document_slot) VALUES (?, ?, 1, NULL, 0)",
                arguments: [managerKey, clientID])
        }
        return LocalCollectionState(outbox: Outbox(clientID: clientID))
    }

    public func apply(_ change: LocalCollectionChange) throws {
        guard !change.isEmpty else { return }
        // A commit that adds or rewrites an outbox entry, or moves the sequence number, is flushed to
        // disk before this returns (`synchronous = FULL`): a write the app was told is queued must
        // survive a power loss, and a sequence number must never be handed out twice (the server
        // would answer the second write as a replay of the first). The rest is server state the
        // cache can fetch again, committed with the cheaper NORMAL.
        let flushes = !change.outboxPuts.isEmpty || change.nextSequence != nil
        try pool.writeWithoutTransaction { db in
            if flushes { try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() }
            defer { if flushes { try? db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() } }
            try db.inTransaction(.immediate) {
                try write(change, db)
                return .commit
            }
            if flushes { flushedCommits.add(1, ordering: .relaxed) }
        }
    }

    /// Commits flushed to disk because they changed the outbox or the sequence number (for tests).
    package let flushedCommits = Atomic<Int>(0)

    private func write(_ change: LocalCollectionChange, _ db: Database) throws {
        if change.promotesStagedSnapshot != nil || change.replacesAllDocuments || !change.upserts.isEmpty || !change.deletions.isEmpty {
            try writeDocuments(change, db)
        }
        if !change.outboxRemovals.isEmpty {
            // Before entries leave the outbox, the sequence after its highest is kept: loading
            // takes the larger of it and the sequence after the highest entry left, so a sequence
            // number is never handed out twice (the server would answer it as a replay).
            try db.cachedStatement(sql: """
                UPDATE engine_state SET next_sequence = max(next_sequence, coalesce((SELECT max(sequence) + 1 FROM outbox WHERE manager_key = ?1), 0))
                WHERE manager_key = ?1
                """).execute(arguments: [managerKey])
            let statement = try db.cachedStatement(sql: "DELETE FROM outbox WHERE manager_key = ? AND sequence = ?")
            for id in change.outboxRemovals {
                try statement.execute(arguments: [managerKey, Int64(id.sequence)])
            }
        }
        if !change.outboxPuts.isEmpty {
            let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO outbox (manager_key, sequence, mutation, attempts, batch) VALUES (?, ?, ?, ?, ?)")
            for entry in change.outboxPuts {
                let text = JSONText.encode(entry.mutation.wireValue)
                try statement.execute(arguments: [managerKey, Int64(entry.id.sequence), text, entry.attempts, entry.batch.map { Int64($0) }])
            }
        }
        // Never backwards: a reused sequence number would read as a replay to the server. A put
        // that reaches it already keeps it (loading counts the outbox's entries), which spares a
        // local write a second page to flush.
        if let next = change.nextSequence, !change.outboxPuts.contains(where: { $0.id.sequence + 1 >= next }) {
            try db.cachedStatement(sql: "UPDATE engine_state SET next_sequence = max(next_sequence, ?) WHERE manager_key = ?")
                .execute(arguments: [Int64(next), managerKey])
        }
        if change.forgetsResumePoint {
            try db.cachedStatement(sql: "UPDATE engine_state SET resume_version = NULL, resume_query = NULL WHERE manager_key = ?")
                .execute(arguments: [managerKey])
        }
        if let resume = change.resumeVersion {
            try db.cachedStatement(sql: "UPDATE engine_state SET resume_version = ?, resume_query = ? WHERE manager_key = ?")
                .execute(arguments: [Int64(resume.rawValue), change.resumeQuery, managerKey])
        }
    }

    /// The documents part of a change: upserts, deletions, a reload or a staged snapshot swapped in.
    private func writeDocuments(_ change: LocalCollectionChange, _ db: Database) throws {
        let slot = try currentSlot(db)
        var target = slot
        if let staged = change.promotesStagedSnapshot {
            guard staging.withLock({ $0 }) == staged else {
                throw TandemError(.aborted, "The staged snapshot is incomplete or was replaced by a newer one; write the whole snapshot instead.")
            }
            target = 1 - slot
        } else if change.replacesAllDocuments {
            try db.execute(sql: "DELETE FROM document WHERE manager_key = ? AND slot = ?", arguments: [managerKey, slot])
        }
        if !change.upserts.isEmpty {
            let encoded = change.encodedUpserts.count == change.upserts.count ? change.encodedUpserts : nil
            try insert(count: change.upserts.count, slot: target, db) { (change.upserts[$0], encoded?[$0]) }
        }
        if !change.deletions.isEmpty {
            let statement = try db.cachedStatement(sql: "DELETE FROM document WHERE manager_key = ? AND slot = ? AND path = ?")
            for path in change.deletions {
                try statement.execute(arguments: [managerKey, target, path.description])
            }
        }
        if change.promotesStagedSnapshot != nil {
            // The swap: the staged slot becomes the cache, the old documents go.
            try db.execute(sql: "UPDATE engine_state SET document_slot = ? WHERE manager_key = ?", arguments: [target, managerKey])
            try db.execute(sql: "DELETE FROM document WHERE manager_key = ? AND slot = ?", arguments: [managerKey, slot])
            staging.withLock { $0 = nil }
        }
    }

    public func clear() throws {
        try pool.write { db in
            staging.withLock { $0 = nil }
            try db.execute(sql: "DELETE FROM document WHERE manager_key = ?", arguments: [managerKey])
            try db.execute(sql: "DELETE FROM outbox WHERE manager_key = ?", arguments: [managerKey])
            try db.execute(sql: "DELETE FROM engine_state WHERE manager_key = ?", arguments: [managerKey])
        }
    }

    package func stage(_ changes: [RemoteChange], snapshot: Int, startsSnapshot: Bool) {
        // Queued on the writer, whose queue runs writes in order: the engine decodes the next
        // piece meanwhile, and the swap (a later write) finds every piece staged before it.
        pool.asyncWrite({ [self] db in
            let other = 1 - (try currentSlot(db))
            if startsSnapshot {
                // Whatever the other slot holds is left from a snapshot that never finished.
                try db.execute(sql: "DELETE FROM document WHERE manager_key = ? AND slot = ?", arguments: [managerKey, other])
                staging.withLock { $0 = snapshot }
            } else if staging.withLock({ $0 }) != snapshot {
                return
            }
            try insert(count: changes.count, slot: other, db) { index in
                changes[index].document.map { ($0, changes[index].encodedData) }
            }
        }, completion: { [self] _, result in
            // A piece that failed leaves the staged snapshot incomplete: it must not be swapped in.
            if case .failure = result {
                staging.withLock { if $0 == snapshot { $0 = nil } }
            }
        })
    }

    private func currentSlot(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT document_slot FROM engine_state WHERE manager_key = ?"), arguments: [managerKey]) ?? 0
    }

    /// Inserts `count` rows into a slot: `row` gives each one's document and, when known, its data
    /// as JSON text (nil for a row to skip).
    private func insert(count: Int, slot: Int64, _ db: Database, row: (Int) -> (document: Document, encoded: String?)?) throws {
        let statement = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO document (manager_key, slot, path, data, version, create_time, update_time)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """)
        try Self.insert(count: count, managerKey: managerKey, slot: slot, with: statement, row: row)
    }

    /// Runs the document insert once per row, binding through SQLite's C API: a snapshot writes
    /// many thousands of rows, and building GRDB's arguments for each was a third of the write.
    private static func insert(count: Int, managerKey: String, slot: Int64, with statement: Statement,
                               row: (Int) -> (document: Document, encoded: String?)?) throws {
        let handle = statement.sqliteStatement
        // SQLite keeps its own copy of the key (SQLITE_TRANSIENT); the other texts live only
        // through their step, so it reads them in place.
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        sqlite3_reset(handle)
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        var managerKey = managerKey
        try managerKey.withUTF8 { key in
            try check(sqlite3_bind_text(handle, 1, key.baseAddress, Int32(key.count), transient), statement)
        }
        try check(sqlite3_bind_int64(handle, 2, slot), statement)
        for index in 0..<count {
            guard let (document, encoded) = row(index) else { continue }
            var path = document.path.description
            var data = encoded ?? JSONText.encode(document.data)
            try check(sqlite3_bind_int64(handle, 5, Int64(document.version.rawValue)), statement)
            try check(sqlite3_bind_double(handle, 6, document.createTime.timeIntervalSince1970), statement)
            try check(sqlite3_bind_double(handle, 7, document.updateTime.timeIntervalSince1970), statement)
            try path.withUTF8 { path in
                try data.withUTF8 { data in
                    try check(sqlite3_bind_text(handle, 3, path.baseAddress, Int32(path.count), nil), statement)
                    try check(sqlite3_bind_text(handle, 4, data.baseAddress, Int32(data.count), nil), statement)
                    let code = sqlite3_step(handle)
                    if code != SQLITE_DONE { try check(code, statement) }
                    sqlite3_reset(handle)
                }
            }
        }
    }

    private static func check(_ code: Int32, _ statement: Statement) throws {
        guard code != SQLITE_OK && code != SQLITE_DONE else { return }
        let message = sqlite3_errmsg(sqlite3_db_handle(statement.sqliteStatement)).map { String(cString: $0) }
        throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
    }

    /// A document row as read, its JSON not parsed yet.
    struct StoredDocument {
        var path: String
        var data: String
        var version: Int64
        var created: Double
        var updated: Double

        /// By position: the columns of the SELECT above, without a lookup by name per row.
        init(_ row: Row) {
            path = row[0]
            data = row[1]
            version = row[2]
            created = row[3]
            updated = row[4]
        }

        func document() throws -> Document {
            // Damaged JSON is the cache's loss, not a caller's bad argument: said as such, with the path.
            guard case .object(let data)? = try? JSONText.parse(data), let path = DocumentPath(trusted: path) else {
                throw TandemError(.dataLoss, "The cached document \(path) is damaged; clear this engine's cache to reload it from the server.")
            }
            return Document(
                path: path, data: data, version: Version(UInt64(version)),
                createTime: Date(timeIntervalSince1970: created), updateTime: Date(timeIntervalSince1970: updated))
        }
    }

    /// The documents of rows read, in their order; parsed on two cores when there are many.
    static func documents(from rows: [StoredDocument]) throws -> [Document] {
        func parse(_ rows: ArraySlice<StoredDocument>) -> Result<[Document], any Error> {
            Result { try rows.map { try $0.document() } }
        }
        guard rows.count >= 4_096 else { return try parse(rows[...]).get() }
        let half = rows.count / 2
        var head: Result<[Document], any Error> = .success([])
        var tail: Result<[Document], any Error> = .success([])
        Parallel.both({ head = parse(rows[..<half]) }, { tail = parse(rows[half...]) })
        var documents = try head.get()
        documents.append(contentsOf: try tail.get())
        return documents
    }
}
