import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// Commits every queued request in one transaction. A request that is refused (a precondition,
    /// say) has written nothing when it is refused (see `apply`), so it fails alone and needs no
    /// savepoint of its own. Called by the one drain, on the database's writer.
    func commitTogether(_ requests: [[Mutation]], db: Database) -> [Result<CommitResult, any Error>] {
        let time = ServerTime(WireTimestamp.date(milliseconds: WireTimestamp.milliseconds(configuration.now())))
        let start = lastVersion.withLock { $0 }
        let limits = configuration.limits
        // Each client's newest applied sequence, as committed, and as this transaction leaves it.
        let committedMarks = highWaterMarks.withLock { $0 }
        var marks: [String: Int64] = [:]
        do {
            var results: [Result<CommitResult, any Error>] = []
            var last = start
            try db.immediateTransaction {
                results = []
                var version = start
                if requests.count == 1 {
                    // Alone in the transaction: a refusal rolls the whole transaction back (thrown
                    // as a Refusal below), so no savepoint is needed.
                    do {
                        let result = try Self.apply(requests[0], db: db, version: version.next, committed: version, time: time, limits: limits,
                                                    marks: &marks, committedMarks: committedMarks)
                        if result.batch != nil { version = version.next }
                        results.append(.success(result))
                    } catch let error as TandemError {
                        throw Refusal(error: error)
                    }
                } else {
                    for mutations in requests {
                        do {
                            let result = try Self.apply(mutations, db: db, version: version.next, committed: version, time: time, limits: limits,
                                                        marks: &marks, committedMarks: committedMarks)
                            if result.batch != nil { version = version.next }
                            results.append(.success(result))
                        } catch let error as TandemError {
                            results.append(.failure(error))
                        }
                    }
                }
                last = version
            }
            lastVersion.withLock { $0 = last }
            highWaterMarks.withLock { known in
                // A bound on memory: past it, marks are read from the database again as needed.
                if known.count + marks.count > Self.highWaterMarksKept { known.removeAll() }
                known.merge(marks) { $1 }
            }
            transactions.add(1, ordering: .relaxed)
            requestsCommitted.add(requests.count, ordering: .relaxed)
            // Durable now: tell the listeners, in version order, before answering the writers.
            for case .success(let result) in results {
                if let batch = result.batch, !batch.changes.isEmpty { publish(batch) }
            }
            return results
        } catch let refusal as Refusal {
            return [.failure(refusal.error)]
        } catch {
            let failure = TandemError(.unavailable, "The server database failed to commit: \(error). Nothing was written; retry.", cause: error)
            return requests.map { _ in .failure(failure) }
        }
    }

    /// A lone request's refusal, thrown out of the transaction to roll it back.
    struct Refusal: Error {
        var error: TandemError
    }

    /// How many clients' high-water marks the store keeps in memory.
    static let highWaterMarksKept = 100_000

    /// Applies one request's mutations in order at `version`. Throws a `TandemError` when any
    /// mutation is refused, and only before it writes anything: every mutation is checked first,
    /// then all are written, so a refused request leaves the transaction as it found it. Any
    /// other error (from SQLite) fails the whole transaction.
    ///
    /// `marks` holds the high-water marks this transaction has read or moved; `committedMarks`
    /// those known committed before it. A refused request leaves `marks` as it was.
    static func apply(_ mutations: [Mutation], db: Database, version: Version, committed: Version, time: ServerTime, limits: ServerLimits,
                      marks: inout [String: Int64], committedMarks: [String: Int64]) throws -> CommitResult {
        var working: [DocumentPath: Document?] = [:]
        var changedOrder: [DocumentPath] = []
        var writer: [DocumentPath: MutationID] = [:]
        var highWaters = marks
        var acknowledgements: [WriteAcknowledgement] = []
        // Each document's data is encoded once: to check its size, to store it, to keep the result.
        var encoded: [DocumentPath: String] = [:]
        var applied: [(id: MutationID, document: Document?, data: String?)] = []
        // Stored rows this request replaces that an identified mutation wrote: that mutation's
        // answer may still name the row (see `storedAcknowledgement`), so it is kept before the row goes.
        var replaced: [DocumentPath: StoredRow] = [:]
        var appliedAny = false

        for mutation in mutations {
            if let id = mutation.id {
                // -1: the client has no applied mutation yet.
                let highWater: Int64
                if let known = highWaters[id.clientID] ?? committedMarks[id.clientID] {
                    highWater = known
                } else {
                    let statement = try RawStatement(db, sql: "SELECT max(sequence) FROM mutation_results WHERE client_id = ?")
                    try statement.bind(1, id.clientID)
                    highWater = try statement.first { $0.int64(0) ?? -1 } ?? -1
                    highWaters[id.clientID] = highWater
                }
                if Int64(clamping: id.sequence) <= highWater {
                    acknowledgements.append(try storedAcknowledgement(db, id: id, committed: committed))
                    continue
                }
            }
            let existing: Document?
            if let entry = working[mutation.path] {
                existing = entry
            } else if let row = try fetchStoredRow(db, path: mutation.path) {
                existing = row.document
                if row.writer != nil, replaced[mutation.path] == nil { replaced[mutation.path] = row }
            } else {
                existing = nil
            }
            // `commit` validated the mutations before queueing them.
            let after = try mutation.applyValidated(to: existing, version: version, serverTime: time)
            let text = after.map { JSONText.encode($0.data) }
            if let text { try limits.checkDocument(encoded: text, at: mutation.path) }
            encoded[mutation.path] = text
            appliedAny = true
            if existing != nil || after != nil {
                if working[mutation.path] == nil { changedOrder.append(mutation.path) }
                working[mutation.path] = .some(after)
            }
            if let id = mutation.id {
                writer[mutation.path] = id
                highWaters[id.clientID] = Int64(clamping: id.sequence)
                applied.append((id, after, text))
            } else {
                writer[mutation.path] = nil
            }
            acknowledgements.append(WriteAcknowledgement(id: mutation.id, version: version, document: after, encodedData: text))
        }
        // Accepted: nothing below refuses.
        marks = highWaters
        guard appliedAny else { return CommitResult(acknowledgements: acknowledgements, batch: nil) }

        let timeMillis = WireTimestamp.milliseconds(time.date)
        var changes: [RemoteChange] = []
        for path in changedOrder {
            let document = working[path]!
            let id = writer[path]
            if let row = replaced[path] { try keepAnswer(of: row, db: db) }
            let upsert = try RawStatement(db, sql: """
                INSERT OR REPLACE INTO documents
                    (path, collection, collection_group, version, create_time, update_time, data, mutation_client, mutation_sequence)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            try upsert.bind(1, path.description)
            try upsert.bind(2, path.parent.description)
            try upsert.bind(3, path.collectionGroup)
            try upsert.bind(4, Int64(version.rawValue))
            try upsert.bind(5, document.map { WireTimestamp.milliseconds($0.createTime) } ?? timeMillis)
            try upsert.bind(6, timeMillis)
            try upsert.bind(7, encoded[path] ?? nil)
            try upsert.bind(8, id?.clientID)
            try upsert.bind(9, id.map { Int64($0.sequence) })
            try upsert.execute()
            changes.append(RemoteChange(path: path, document: document, version: version, mutationID: id))
        }
        for (id, document, data) in applied {
            let result = try RawStatement(db, sql: "INSERT OR REPLACE INTO mutation_results (client_id, sequence, version, commit_time, document, path) VALUES (?, ?, ?, ?, ?, ?)")
            try result.bind(1, id.clientID)
            try result.bind(2, Int64(id.sequence))
            try result.bind(3, Int64(version.rawValue))
            try result.bind(4, timeMillis)
            if let document, writer[document.path] == id {
                // The row just written is this answer's document: name it instead of copying it.
                try result.bind(6, document.path.description)
            } else if let document, let data {
                var writer = WireWriter(capacity: data.utf8.count + 160)
                writer.document(document, encodedData: data)
                try result.bind(5, writer.text)
            }
            try result.execute()
        }
        return CommitResult(acknowledgements: acknowledgements, batch: CommittedBatch(version: version, changes: changes))
    }

    /// The answer first given to a mutation already applied; if it was pruned, the committed
    /// version without a document.
    ///
    /// An answer is stored one of three ways: its document as wire text; no document and no path
    /// (the mutation deleted it); or no document and the path of the row the mutation wrote, which
    /// is the answer's document for as long as that row names the mutation as its writer. Most
    /// documents are written once, so most answers cost a few bytes instead of a copy of the
    /// document; before a write replaces such a row, `keepAnswer` copies it into the answer.
    static func storedAcknowledgement(_ db: Database, id: MutationID, committed: Version) throws -> WriteAcknowledgement {
        guard let row = try Row.fetchOne(db, sql: "SELECT version, document, path FROM mutation_results WHERE client_id = ? AND sequence = ?", arguments: [id.clientID, Int64(id.sequence)]) else {
            return WriteAcknowledgement(id: id, version: committed, document: nil)
        }
        let version = Version(UInt64(row[0] as Int64))
        if let text = row[1] as String? {
            return WriteAcknowledgement(id: id, version: version, document: try Document(wire: try JSONText.parse(text)))
        }
        guard let path = row[2] as String? else { return WriteAcknowledgement(id: id, version: version, document: nil) }
        let written = try RawStatement(db, sql: "SELECT * FROM documents WHERE path = ? AND data IS NOT NULL AND mutation_client = ? AND mutation_sequence = ?")
        try written.bind(1, path)
        try written.bind(2, id.clientID)
        try written.bind(3, Int64(id.sequence))
        guard let document = try written.first({ try self.document($0) }) else {
            throw TandemError(.dataLoss, "The stored answer to mutation \(id.clientID)#\(id.sequence) names \(path), which no longer holds it.")
        }
        return WriteAcknowledgement(id: id, version: version, document: document)
    }

    /// A stored document row with the text of its data and the mutation that wrote it, if any.
    struct StoredRow {
        var document: Document
        var data: String
        var writer: MutationID?
    }

    static func fetchStoredRow(_ db: Database, path: DocumentPath) throws -> StoredRow? {
        let statement = try RawStatement(db, sql: "SELECT * FROM documents WHERE path = ? AND data IS NOT NULL")
        try statement.bind(1, path.description)
        return try statement.first { row throws -> StoredRow in
            let document = try self.document(row, path: path)
            let writer = row.text(Column.mutationClient).flatMap { client in
                row.int64(Column.mutationSequence).map { MutationID(clientID: client, sequence: UInt64($0)) }
            }
            return StoredRow(document: document, data: row.text(Column.data) ?? "{}", writer: writer)
        }
    }

    /// Copies a row about to be replaced into the answer of the mutation that wrote it, if that
    /// answer still names the row instead of holding a copy.
    static func keepAnswer(of row: StoredRow, db: Database) throws {
        guard let id = row.writer else { return }
        var writer = WireWriter(capacity: row.data.utf8.count + 160)
        writer.document(row.document, encodedData: row.data)
        let statement = try db.cachedStatement(sql: """
            UPDATE mutation_results SET document = ? WHERE client_id = ? AND sequence = ? AND document IS NULL AND path = ?
            """)
        try statement.execute(arguments: [writer.text, id.clientID, Int64(id.sequence), row.document.path.description])
    }

    // MARK: Rows

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
                rows.int64(Column.mutationSequence).map { MutationID(clientID: client, sequence: UInt64($0)) }
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
