import GRDB
import GRDBSQLite

/// A cached statement driven through SQLite's C API, for the few statements every write runs: each
/// value is bound straight to it (copied by SQLite), without building GRDB arguments, and a row is
/// read by column. The statement is reset when taken, after `execute` and `first`, and when `step`
/// reaches the end; a read that stops early calls `reset`.
struct RawStatement {
    private let statement: Statement
    private var handle: OpaquePointer { statement.sqliteStatement }

    init(_ db: Database, sql: String) throws {
        statement = try db.cachedStatement(sql: sql)
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// A cached statement with `arguments` bound (by GRDB, once), to step through raw.
    init(_ db: Database, sql: String, arguments: StatementArguments) throws {
        try self.init(db, sql: sql)
        try statement.setArguments(arguments)
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    func bind(_ index: Int32, _ text: String?) throws {
        guard var text else {
            try check(sqlite3_bind_null(handle, index))
            return
        }
        try text.withUTF8 { bytes in
            try check(sqlite3_bind_text(handle, index, bytes.baseAddress, Int32(bytes.count), Self.transient))
        }
    }

    func bind(_ index: Int32, _ value: Int64?) throws {
        guard let value else {
            try check(sqlite3_bind_null(handle, index))
            return
        }
        try check(sqlite3_bind_int64(handle, index, value))
    }

    /// Runs a statement that returns no rows, then resets it for its next use.
    func execute() throws {
        defer { sqlite3_reset(handle) }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE || code == SQLITE_ROW else { throw error(code) }
    }

    /// Steps to the first row and reads it with `read`; nil when there is none.
    func first<T>(_ read: (RawStatement) throws -> T) throws -> T? {
        defer { sqlite3_reset(handle) }
        let code = sqlite3_step(handle)
        if code == SQLITE_DONE { return nil }
        guard code == SQLITE_ROW else { throw error(code) }
        return try read(self)
    }

    /// Steps to the next row: true when there is one; at the end, false and reset.
    func step() throws -> Bool {
        let code = sqlite3_step(handle)
        if code == SQLITE_ROW { return true }
        sqlite3_reset(handle)
        guard code == SQLITE_DONE else { throw error(code) }
        return false
    }

    /// Resets the statement, as a read that stops before the end must.
    func reset() {
        sqlite3_reset(handle)
    }

    /// The UTF-8 of a text column in place, valid until the next step; nil for NULL.
    func bytes(_ column: Int32) -> UnsafeBufferPointer<UInt8>? {
        guard sqlite3_column_type(handle, column) != SQLITE_NULL, let text = sqlite3_column_text(handle, column) else { return nil }
        return UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, column)))
    }

    func int64(_ column: Int32) -> Int64? {
        sqlite3_column_type(handle, column) == SQLITE_NULL ? nil : sqlite3_column_int64(handle, column)
    }

    func text(_ column: Int32) -> String? {
        guard let bytes = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    private func check(_ code: Int32) throws {
        guard code == SQLITE_OK else { throw error(code) }
    }

    private func error(_ code: Int32) -> DatabaseError {
        let message = sqlite3_errmsg(sqlite3_db_handle(handle)).map { String(cString: $0) }
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
    }
}

extension Database {
    /// Runs `body` in one immediate transaction, committed when it returns and rolled back when it
    /// throws. Its BEGIN and COMMIT are cached statements: GRDB's `inTransaction` parses both anew
    /// each time, which shows on a commit of one small write.
    func immediateTransaction(_ body: () throws -> Void) throws {
        try cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            try body()
            try cachedStatement(sql: "COMMIT TRANSACTION").execute()
        } catch {
            // A failed COMMIT may have rolled back already.
            if isInsideTransaction { try? cachedStatement(sql: "ROLLBACK TRANSACTION").execute() }
            throw error
        }
    }
}
