import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// Decides every queued submission in one transaction, in order. A refused request writes only
    /// the records of its refusal (the planner decides before it writes), so requests need no
    /// savepoints of their own; an error from SQLite fails every request of the transaction.
    /// Called by the one drain, on the database's writer; `mustReport` makes it tell the observers
    /// even when nothing changed (see ``commitsUnderWay()``).
    func commitTogether(_ submissions: [CommitSubmission], db: Database, mustReport: Bool = false) -> [Result<[Result<CommitResult, TandemError>], any Error>] {
        let time = ServerTime(WireTimestamp.date(milliseconds: WireTimestamp.milliseconds(configuration.now())))
        let start = lastVersion.withLock { $0 }
        var transaction = SQLiteTransaction(db: db, committedMarks: highWaterMarks.withLock { $0 }, committedOwners: owners.withLock { $0 })
        do {
            var answers: [[Result<CommitResult, TandemError>]] = []
            var last = start
            try db.immediateTransaction {
                (answers, last) = try CommitPlanner.decide(submissions, in: &transaction, time: time, after: start)
            }
            lastVersion.withLock { $0 = last }
            let (newMarks, newOwners) = (transaction.marks, transaction.owners)
            // The transaction shares the known marks' storage: dropped first, the merges below
            // change them in place instead of copying every mark on every commit.
            transaction = SQLiteTransaction(db: db, committedMarks: [:])
            highWaterMarks.withLock { known in
                // A bound on memory: past it, marks are read from the database again as needed.
                if known.count + newMarks.count > Self.highWaterMarksKept { known.removeAll() }
                known.merge(newMarks) { $1 }
            }
            owners.withLock { known in
                if known.count + newOwners.count > Self.highWaterMarksKept { known.removeAll() }
                known.merge(newOwners) { $1 }
            }
            transactions.add(1, ordering: .relaxed)
            requestsCommitted.add(submissions.reduce(0) { $0 + $1.requests.count }, ordering: .relaxed)
            // Durable and visible now: tell the observers, in version order, before answering.
            var batches: [CommittedBatch] = []
            for results in answers {
                for case .success(let result) in results {
                    if let batch = result.batch, !batch.changes.isEmpty { batches.append(batch) }
                }
            }
            if last != start || !batches.isEmpty || mustReport { publish(CommitNotice(batches: batches, visibleThrough: last)) }
            return answers.map { .success($0) }
        } catch {
            if mustReport { publish(CommitNotice(batches: [], visibleThrough: start)) }
            let failure = TandemError(.unavailable, "The server database failed to commit: \(error). Nothing was written; retry.", cause: error)
            return submissions.map { _ in .failure(failure) }
        }
    }

    /// How many clients' high-water marks the store keeps in memory.
    static let highWaterMarksKept = 100_000

    // MARK: Records

    /// The record of a decided mutation, or nil.
    ///
    /// An applied mutation's answer is stored one of three ways: its document as wire text; no
    /// document and no path (the mutation deleted it); or no document and the path of the row the
    /// mutation wrote, which is the answer's document for as long as that row names the mutation
    /// as its writer. Most documents are written once, so most answers cost a few bytes instead of
    /// a copy of the document; before a write replaces such a row, `keepAnswer` copies it into the
    /// answer. A refusal keeps its error's code and message.
    static func fetchRecord(_ db: Database, id: MutationID) throws -> MutationRecord? {
        let statement = try RawStatement(db, sql: """
            SELECT version, document, path, status, error_code, error_message, digest, commit_time
            FROM mutation_results WHERE client_id = ? AND sequence = ?
            """)
        try statement.bind(1, id.clientID)
        try statement.bind(2, Int64(bitPattern: id.sequence))
        guard let row = try statement.first({ row in
            (version: row.int64(0) ?? 0, document: row.text(1), path: row.text(2), status: row.text(3),
             code: row.text(4), message: row.text(5), digest: row.int64(6), time: row.int64(7) ?? 0)
        }) else { return nil }
        let version = Version(UInt64(row.version))
        let acknowledgement: WriteAcknowledgement
        if row.status == WriteStatus.refused.rawValue {
            acknowledgement = .refused(id, TandemError(TandemError.Code(rawValue: row.code ?? "unknown"), row.message ?? ""), at: version)
        } else if let text = row.document {
            acknowledgement = WriteAcknowledgement(id: id, version: version, document: try Document(wire: try JSONText.parse(text)))
        } else if let path = row.path {
            let written = try RawStatement(db, sql: "SELECT * FROM documents WHERE path = ? AND data IS NOT NULL AND mutation_client = ? AND mutation_sequence = ?")
            try written.bind(1, path)
            try written.bind(2, id.clientID)
            try written.bind(3, Int64(bitPattern: id.sequence))
            if let document = try written.first({ try self.document($0) }) {
                acknowledgement = WriteAcknowledgement(id: id, version: version, document: document)
            } else {
                // The row it names no longer holds the answer (pruned since, say): the write was
                // decided, and what it answered is gone. Unknown, as for a pruned record — never
                // a failure that would stop every later send of this id from being answered.
                acknowledgement = WriteAcknowledgement(id: id, status: .unknown, version: version)
            }
        } else {
            acknowledgement = WriteAcknowledgement(id: id, version: version, document: nil)
        }
        return MutationRecord(acknowledgement: acknowledgement, digest: row.digest.map { UInt64(bitPattern: $0) },
                              time: WireTimestamp.date(milliseconds: row.time))
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
                row.int64(Column.mutationSequence).map { MutationID(clientID: client, sequence: UInt64(bitPattern: $0)) }
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
        try statement.execute(arguments: [writer.text, id.clientID, Int64(bitPattern: id.sequence), row.document.path.description])
    }
}

/// ``StoreTransaction`` over the SQLite writer's open transaction. The statements every write runs
/// bind straight through SQLite's C API.
struct SQLiteTransaction: StoreTransaction {
    let db: Database
    /// Each client's newest recorded sequence as committed before this transaction (-1: none).
    let committedMarks: [String: Int64]
    /// Those this transaction read or moved.
    var marks: [String: Int64] = [:]
    /// The owner of each writer id as committed before this transaction, for those seen lately.
    let committedOwners: [String: String]
    /// Owners this transaction read or claimed.
    var owners: [String: String] = [:]
    /// The rows read for the paths about to be written, so the answers that name them can be kept.
    private var read: [DocumentPath: SQLiteServerStore.StoredRow] = [:]
    /// The mutation that last wrote each path in this transaction.
    private var lastWriter: [DocumentPath: MutationID] = [:]

    init(db: Database, committedMarks: [String: Int64], committedOwners: [String: String] = [:]) {
        self.db = db
        self.committedMarks = committedMarks
        self.committedOwners = committedOwners
    }

    mutating func owner(of clientID: String) throws -> String? {
        if let known = owners[clientID] ?? committedOwners[clientID] { return known }
        let statement = try RawStatement(db, sql: "SELECT owner FROM writers WHERE client_id = ?")
        try statement.bind(1, clientID)
        let owner = try statement.first { $0.text(0) } ?? nil
        // Only an owner is kept: a writer id nobody owns may be claimed by the next request.
        if let owner { owners[clientID] = owner }
        return owner
    }

    mutating func claim(_ clientID: String, for owner: String) throws {
        let statement = try RawStatement(db, sql: "INSERT INTO writers (client_id, owner) VALUES (?, ?)")
        try statement.bind(1, clientID)
        try statement.bind(2, owner)
        try statement.execute()
        owners[clientID] = owner
    }

    mutating func document(at path: DocumentPath) throws -> Document? {
        let row = try SQLiteServerStore.fetchStoredRow(db, path: path)
        read[path] = row
        return row?.document
    }

    mutating func highestRecordedSequence(of clientID: String) throws -> UInt64? {
        let mark: Int64
        if let known = marks[clientID] ?? committedMarks[clientID] {
            mark = known
        } else {
            let statement = try RawStatement(db, sql: "SELECT max(sequence) FROM mutation_results WHERE client_id = ?")
            try statement.bind(1, clientID)
            mark = try statement.first { $0.int64(0) ?? -1 } ?? -1
            marks[clientID] = mark
        }
        return mark < 0 ? nil : UInt64(mark)
    }

    mutating func record(of id: MutationID) throws -> MutationRecord? {
        try SQLiteServerStore.fetchRecord(db, id: id)
    }

    mutating func prunedSequence(of clientID: String) throws -> UInt64? {
        try Int64.fetchOne(db, sql: "SELECT sequence FROM pruned_clients WHERE client_id = ?", arguments: [clientID]).map { UInt64(bitPattern: $0) }
    }

    mutating func write(_ document: Document?, at path: DocumentPath, version: Version, time: Date, encodedData: String?, writer: MutationID?) throws {
        // The row this write replaces may be the answer of the mutation that wrote it.
        if let row = read.removeValue(forKey: path), row.writer != nil {
            try SQLiteServerStore.keepAnswer(of: row, db: db)
        }
        let timeMillis = WireTimestamp.milliseconds(time)
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
        try upsert.bind(7, document == nil ? nil : encodedData ?? document.map { JSONText.encode($0.data) })
        try upsert.bind(8, writer?.clientID)
        try upsert.bind(9, writer.map { Int64(bitPattern: $0.sequence) })
        try upsert.execute()
        lastWriter[path] = writer
    }

    mutating func record(_ record: MutationRecord, for id: MutationID) throws {
        let answer = record.acknowledgement
        let statement = try RawStatement(db, sql: """
            INSERT OR REPLACE INTO mutation_results
                (client_id, sequence, version, commit_time, document, path, status, error_code, error_message, digest)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        try statement.bind(1, id.clientID)
        try statement.bind(2, Int64(bitPattern: id.sequence))
        try statement.bind(3, Int64(answer.version.rawValue))
        try statement.bind(4, WireTimestamp.milliseconds(record.time))
        if let document = answer.document {
            if lastWriter[document.path] == id {
                // The row just written is this answer's document: name it instead of copying it.
                try statement.bind(6, document.path.description)
            } else {
                var writer = WireWriter(capacity: (answer.encodedData?.utf8.count ?? 64) + 160)
                if let data = answer.encodedData {
                    writer.document(document, encodedData: data)
                } else {
                    writer.document(document)
                }
                try statement.bind(5, writer.text)
            }
        }
        // NULL status is an applied answer, as every row written before statuses were kept.
        if answer.status == .refused {
            try statement.bind(7, WriteStatus.refused.rawValue)
            try statement.bind(8, answer.error?.code.rawValue)
            try statement.bind(9, answer.error?.message)
        }
        try statement.bind(10, record.digest.map { Int64(bitPattern: $0) })
        try statement.execute()
        marks[id.clientID] = max(marks[id.clientID] ?? committedMarks[id.clientID] ?? -1, Int64(bitPattern: id.sequence))
    }

    mutating func applied(version: Version, changedDocuments: Bool) throws {
        // The newest version is read back from the rows at startup: one that wrote no row is kept here.
        guard !changedDocuments else { return }
        try db.cachedStatement(sql: "UPDATE meta SET value = max(value, ?) WHERE key = 'version'").execute(arguments: [Int64(version.rawValue)])
    }
}
