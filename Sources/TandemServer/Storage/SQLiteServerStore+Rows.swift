import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// The columns of `SELECT * FROM documents`.
    enum Column {
        static let path: Int32 = 0, version: Int32 = 3, createTime: Int32 = 4, updateTime: Int32 = 5, data: Int32 = 6
        static let mutationClient: Int32 = 7, mutationSequence: Int32 = 8
    }

    static func fetchDocument(_ db: Database, path: DocumentPath) throws -> Document? {
        let statement = try RawStatement(db, sql: "SELECT * FROM documents WHERE path = ? AND data IS NOT NULL")
        try statement.bind(1, path.description)
        return try statement.first { try document($0, path: path) }
    }

    static func fetchDocuments(_ db: Database, sql: String, arguments: StatementArguments) throws -> [Document] {
        let rows = try RawStatement(db, sql: sql, arguments: arguments)
        defer { rows.reset() }
        var documents: [Document] = []
        while try rows.step() {
            documents.append(try document(rows))
        }
        return documents
    }

    static func fetchChanges(_ db: Database, sql: String, arguments: StatementArguments) throws -> [RemoteChange] {
        let rows = try RawStatement(db, sql: sql, arguments: arguments)
        defer { rows.reset() }
        var changes: [RemoteChange] = []
        while try rows.step() {
            let path = try documentPath(rows)
            guard let version = rows.int64(Column.version) else { throw damaged(path) }
            let id = rows.text(Column.mutationClient).flatMap { client in
                rows.int64(Column.mutationSequence).map { MutationID(clientID: client, sequence: UInt64(bitPattern: $0)) }
            }
            let document = rows.bytes(Column.data) == nil ? nil : try self.document(rows, path: path)
            changes.append(RemoteChange(path: path, document: document, version: Version(UInt64(version)), mutationID: id))
        }
        return changes
    }

    /// The row of `SELECT * FROM documents` a statement is on, as a document (it must not be a
    /// tombstone). Its data is parsed where SQLite holds it.
    static func document(_ row: RawStatement, path known: DocumentPath? = nil) throws -> Document {
        let path = try known ?? documentPath(row)
        guard let version = row.int64(Column.version), let created = row.int64(Column.createTime), let updated = row.int64(Column.updateTime),
              let body = row.bytes(Column.data), case .object(let data)? = try? JSONText.parse(utf8: body) else {
            throw damaged(path)
        }
        return Document(path: path, data: data, version: Version(UInt64(version)),
                        createTime: WireTimestamp.date(milliseconds: created), updateTime: WireTimestamp.date(milliseconds: updated))
    }

    static func documentPath(_ row: RawStatement) throws -> DocumentPath {
        let text = row.text(Column.path) ?? ""
        guard let path = DocumentPath(trusted: text) else {
            throw TandemError(.dataLoss, "The stored path '\(text)' is not a document path.")
        }
        return path
    }

    static func damaged(_ path: DocumentPath) -> TandemError {
        TandemError(.dataLoss, "The stored row of \(path) is damaged: its body is not a JSON object, or a version or time is missing.")
    }
}
