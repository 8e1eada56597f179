import Foundation
import GRDB
import TandemCore

/// Sending: changes numbered and stored before they go, put back when a refusal left them
/// undecided, and settled when answered.
extension ChangeQueueStore {
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
    static func mutation(of row: Row, writer: String, records: CollectionPath) throws -> Mutation {
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
    static func save(_ fields: JSONObject, text: String, at path: DocumentPath, precondition: UInt64?, id: MutationID) -> Mutation {
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
    func unprepare(_ db: Database, account: String, rowIDs: [Int64]) throws -> [Row] {
        let select = try db.cachedStatement(sql: "SELECT * FROM pending WHERE row_id = ? AND account = ?")
        // Whether the record has a newer change than this one: one not yet sent, or one sent after
        // it (a higher sequence). The file decides. An older change never wins over a newer one:
        // two sent changes of a record left undecided together keep the newer, whichever comes
        // first here.
        let newer = try db.cachedStatement(sql: "SELECT 1 FROM pending WHERE account = ? AND record_id = ? AND row_id != ? AND (sequence IS NULL OR sequence > ?)")
        let reset = try db.cachedStatement(sql: "UPDATE pending SET sequence = NULL, data = NULL, alone = 1 WHERE row_id = ? AND account = ?")
        let delete = try db.cachedStatement(sql: "DELETE FROM pending WHERE row_id = ? AND account = ?")
        var kept: [Row] = []
        var dropped: [Int64] = []
        for rowID in rowIDs {
            guard var row = try cache.withLock({ $0[rowID, account] }) ?? Row.fetchOne(select, arguments: [rowID, account]) else { continue }
            if try Bool.fetchOne(newer, arguments: [account, row.recordID, rowID, row.sequence.map { Int64(clamping: $0) }]) != nil {
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
    func settle(_ db: Database, account: String, _ answered: [(rowID: Int64, settlement: Settlement)]) throws {
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
}
