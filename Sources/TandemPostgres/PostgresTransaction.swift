import Foundation
import Logging
import PostgresNIO
import TandemCore
import TandemServer

/// ``StoreTransaction`` over what one commit's requests can read, fetched before they are decided
/// (each request reads only the documents it writes and the records of its own ids), and what they
/// write, kept until ``flush(over:expectingCommits:to:notifying:logger:)`` writes it in a few statements.
struct PostgresTransaction: StoreTransaction {
    /// Each path the requests write: its document, nil when there is none (or a tombstone).
    var documents: [DocumentPath: Document?] = [:]
    var highest: [String: UInt64] = [:]
    var records: [MutationID: MutationRecord] = [:]
    var pruned: [String: UInt64] = [:]
    var owners: [String: String] = [:]

    struct Written {
        var document: Document?
        var version: Version
        var time: Date
        var encodedData: String?
        var writer: MutationID?
    }
    var written: [DocumentPath: Written] = [:]
    var writtenOrder: [DocumentPath] = []
    /// Every write, in order: the commit log's rows (a path written by two requests of the group
    /// is in both commits, where `written` keeps its last state).
    var logged: [(path: DocumentPath, entry: Written)] = []
    var recorded: [MutationID: MutationRecord] = [:]
    var recordedOrder: [MutationID] = []
    var claims: [(clientID: String, owner: String)] = []

    /// What ``prefetch(_:earlierAfter:over:logger:)`` read besides what the requests can ask for.
    struct Read {
        /// The counter: the newest version, and how many commits wrote (which moves on each).
        var version = Version.zero
        var commits: Int64 = 0
        /// The changes of the commits after the version this node last told its observers of,
        /// through `version`, in version order.
        var earlier: [RemoteChange] = []
        /// The newest version whose rows the commit log may have dropped: above `told`, some of
        /// `earlier` may be missing (``PostgresServerStore/missedCommits(told:prunedThrough:)``).
        var logPrunedThrough = Version.zero
    }

    /// Reads what `requests` can ask for, the counter, and the changes of the commits after
    /// `told` (other nodes' commits this node has not told its observers of), in one statement
    /// ([Prefetch]), so one snapshot: each round trip to PostgreSQL is spent while other commits wait.
    static func prefetch(_ requests: [CommitPlanner.CheckedRequest], earlierAfter told: Version,
                         over connection: PostgresConnection, logger: Logger) async throws -> (PostgresTransaction, Read) {
        var transaction = PostgresTransaction()
        var paths: Set<String> = []
        var clients: Set<String> = []
        var ids: Set<MutationID> = []
        for request in requests {
            for mutation in request.mutations {
                paths.insert(mutation.path.description)
                transaction.documents[mutation.path] = .some(nil)
                if let id = mutation.id {
                    clients.insert(id.clientID)
                    ids.insert(id)
                }
            }
        }
        let pathList = Array(paths)
        let clientList = Array(clients)
        let idClients = ids.map(\.clientID)
        let idSequences = ids.map { Int64(bitPattern: $0.sequence) }
        var read = Read()
        let rows = try await connection.execute(Prefetch(paths: pathList, clients: clientList, idClients: idClients, idSequences: idSequences,
                                                         told: Int64(told.rawValue)), logger: logger)
        for try await row in rows {
            let cells = row.makeRandomAccess()
            switch try cells[0].decode(Int.self) {
            case 0:
                if let change = try PostgresServerStore.change(cells, from: 1), let document = change.document {
                    transaction.documents[change.path] = .some(document)
                }
            case 1:
                if let sequence = try cells[2].decode(Int64?.self) {
                    transaction.highest[try cells[1].decode(String.self)] = UInt64(bitPattern: sequence)
                }
            case 2:
                transaction.pruned[try cells[1].decode(String.self)] = UInt64(bitPattern: try cells[2].decode(Int64.self))
            case 3:
                transaction.owners[try cells[1].decode(String.self)] = try cells[5].decode(String.self)
            case 4:
                let id = MutationID(clientID: try cells[1].decode(String.self), sequence: UInt64(bitPattern: try cells[2].decode(Int64.self)))
                let at = Version(UInt64(try cells[3].decode(Int64.self)))
                let acknowledgement: WriteAcknowledgement
                if try cells[6].decode(String?.self) == WriteStatus.refused.rawValue {
                    acknowledgement = .refused(id, TandemError(TandemError.Code(rawValue: try cells[8].decode(String?.self) ?? "unknown"),
                                                               try cells[9].decode(String?.self) ?? ""), at: at)
                } else if let document = try cells[5].decode(String?.self) {
                    acknowledgement = WriteAcknowledgement(id: id, version: at, document: try Document(wire: try JSONText.parse(document)))
                } else {
                    acknowledgement = WriteAcknowledgement(id: id, version: at, document: nil)
                }
                transaction.records[id] = MutationRecord(acknowledgement: acknowledgement, digest: try cells[10].decode(Int64?.self).map { UInt64(bitPattern: $0) },
                                                         time: WireTimestamp.date(milliseconds: try cells[4].decode(Int64.self)))
            case 5:
                if let change = try PostgresServerStore.change(cells, from: 1) { read.earlier.append(change) }
            default:
                read.version = Version(UInt64(try cells[2].decode(Int64.self)))
                read.commits = try cells[3].decode(Int64.self)
                read.logPrunedThrough = Version(UInt64(try cells[4].decode(Int64.self)))
            }
        }
        return (transaction, read)
    }

    /// ``prefetch(_:earlierAfter:over:logger:)``'s statement, prepared once per connection.
    ///
    /// Its rows are tagged by their first column: 0 a document the requests write, 1 a client's
    /// highest recorded sequence, 2 its pruned sequence, 3 its owner, 4 the record of an id,
    /// 5 a change of a commit after `told` (from the commit log), 6 the counter with how far the
    /// log was trimmed. Documents and changes hold
    /// ``PostgresServerStore/documentColumns`` from the second column on; the others use the
    /// same columns as their types allow.
    ///
    /// Every part reads through an index whatever the values bound: the plan PostgreSQL keeps
    /// for a prepared statement does not know them (the records are looked up one id at a time,
    /// `LIMIT 1` keeping that from becoming a join that reads them all).
    struct Prefetch: PostgresPreparedStatement {
        static let name = "tandem_prefetch_v3"
        static let sql = """
            SELECT 0, \(PostgresServerStore.documentColumns), NULL::text, NULL::text, NULL::bigint
                FROM tandem_documents AS d WHERE d.path = ANY($1::text[]) AND d.data IS NOT NULL
            UNION ALL
            SELECT 1, c, (SELECT max(r.sequence) FROM tandem_mutation_results AS r WHERE r.client_id = c), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
                FROM unnest($2::text[]) AS c
            UNION ALL
            SELECT 2, client_id, sequence, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM tandem_pruned_clients WHERE client_id = ANY($2::text[])
            UNION ALL
            SELECT 3, client_id, NULL, NULL, NULL, owner, NULL, NULL, NULL, NULL, NULL FROM tandem_writers WHERE client_id = ANY($2::text[])
            UNION ALL
            SELECT 4, r.client_id, r.sequence, r.version, r.commit_time, r.document, r.status, NULL, r.error_code, r.error_message, r.digest
                FROM unnest($3::text[], $4::bigint[]) AS wanted(client_id, sequence),
                    LATERAL (SELECT * FROM tandem_mutation_results AS r WHERE r.client_id = wanted.client_id AND r.sequence = wanted.sequence LIMIT 1) AS r
            UNION ALL
            SELECT 5, \(PostgresServerStore.documentColumns), NULL::text, NULL::text, NULL::bigint
                FROM tandem_changes AS d WHERE d.version > $5::bigint AND d.version <= (SELECT version FROM tandem_counter WHERE id = 1)
            UNION ALL
            SELECT 6, NULL, version, commits, (SELECT value FROM tandem_meta WHERE key = 'log_pruned_through'), NULL, NULL, NULL, NULL, NULL, NULL
                FROM tandem_counter WHERE id = 1
            ORDER BY 1, 3, 2
            """

        var paths: [String]
        var clients: [String]
        var idClients: [String]
        var idSequences: [Int64]
        var told: Int64

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(paths)
            bindings.append(clients)
            bindings.append(idClients)
            bindings.append(idSequences)
            bindings.append(told)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
    }

    mutating func document(at path: DocumentPath) throws -> Document? {
        guard let known = documents[path] else {
            throw TandemError(.internal, "The commit read \(path), which it had not fetched.")
        }
        return known
    }

    mutating func highestRecordedSequence(of clientID: String) throws -> UInt64? {
        highest[clientID]
    }

    mutating func record(of id: MutationID) throws -> MutationRecord? {
        records[id]
    }

    mutating func prunedSequence(of clientID: String) throws -> UInt64? {
        pruned[clientID]
    }

    mutating func owner(of clientID: String) throws -> String? {
        owners[clientID]
    }

    mutating func claim(_ clientID: String, for owner: String) throws {
        owners[clientID] = owner
        claims.append((clientID, owner))
    }

    mutating func write(_ document: Document?, at path: DocumentPath, version: Version, time: Date, encodedData: String?, writer: MutationID?) throws {
        documents[path] = .some(document)
        if written[path] == nil { writtenOrder.append(path) }
        let entry = Written(document: document, version: version, time: time, encodedData: encodedData, writer: writer)
        written[path] = entry
        logged.append((path, entry))
    }

    mutating func record(_ record: MutationRecord, for id: MutationID) throws {
        if recorded[id] == nil { recordedOrder.append(id) }
        recorded[id] = record
        records[id] = record
        highest[id.clientID] = max(highest[id.clientID] ?? 0, id.sequence)
    }

    /// Whether the requests wrote anything: a document, a record or a claim.
    var writes: Bool { !writtenOrder.isEmpty || !recordedOrder.isEmpty || !claims.isEmpty }

    /// Writes what the requests wrote (documents, records and claims) and moves the counter to
    /// `version`, in one statement ([Flush]), which first takes the counter's lock and checks that
    /// it counts `commits` commits still: false, writing nothing, when another commit came since
    /// the requests read. Inside a transaction that holds the lock already, the check passes.
    /// With `notifying`, the same statement tells the other nodes of the commit of the versions
    /// after `from` (``CommitNotification``): PostgreSQL delivers it once the commit is durable,
    /// and never when it is not made.
    /// Returns whether the gate passed, and whether a notification went.
    func flush(over connection: PostgresConnection, expectingCommits commits: Int64, to version: Version, notifying: (node: String, from: Version)?,
               logger: Logger) async throws -> (passed: Bool, notified: Bool) {
        var paths: [String] = [], collections: [String] = [], groups: [String] = []
        var versions: [Int64] = [], created: [Int64] = [], updated: [Int64] = []
        var live: [Bool] = [], data: [String] = [], hasWriter: [Bool] = [], writerClients: [String] = [], writerSequences: [Int64] = []
        for path in writtenOrder {
            let entry = written[path]!
            let time = WireTimestamp.milliseconds(entry.time)
            paths.append(path.description)
            collections.append(path.parent.description)
            groups.append(path.collectionGroup)
            versions.append(Int64(entry.version.rawValue))
            created.append(entry.document.map { WireTimestamp.milliseconds($0.createTime) } ?? time)
            updated.append(time)
            live.append(entry.document != nil)
            data.append(entry.document.map { entry.encodedData ?? JSONText.encode($0.data) } ?? "")
            hasWriter.append(entry.writer != nil)
            writerClients.append(entry.writer?.clientID ?? "")
            writerSequences.append(entry.writer.map { Int64(bitPattern: $0.sequence) } ?? 0)
        }
        var clients: [String] = [], sequences: [Int64] = [], recordVersions: [Int64] = [], times: [Int64] = []
        var hasDocument: [Bool] = [], documents: [String] = [], refused: [Bool] = [], codes: [String] = [], messages: [String] = []
        var hasDigest: [Bool] = [], digests: [Int64] = []
        for id in recordedOrder {
            let record = recorded[id]!
            let answer = record.acknowledgement
            clients.append(id.clientID)
            sequences.append(Int64(bitPattern: id.sequence))
            recordVersions.append(Int64(answer.version.rawValue))
            times.append(WireTimestamp.milliseconds(record.time))
            if let document = answer.document {
                var writer = WireWriter(capacity: (answer.encodedData?.utf8.count ?? 64) + 160)
                if let data = answer.encodedData {
                    writer.document(document, encodedData: data)
                } else {
                    writer.document(document)
                }
                hasDocument.append(true)
                documents.append(writer.text)
            } else {
                hasDocument.append(false)
                documents.append("")
            }
            refused.append(answer.status == .refused)
            codes.append(answer.error?.code.rawValue ?? "")
            messages.append(answer.error?.message ?? "")
            hasDigest.append(record.digest != nil)
            digests.append(record.digest.map { Int64(bitPattern: $0) } ?? 0)
        }
        // The commit log: each write's path, version, times, data (empty for a deletion) and writer.
        var log = Flush.Log()
        for (path, entry) in logged {
            log.paths.append(path.description)
            log.versions.append(Int64(entry.version.rawValue))
            let time = WireTimestamp.milliseconds(entry.time)
            log.created.append(entry.document.map { WireTimestamp.milliseconds($0.createTime) } ?? time)
            log.updated.append(time)
            log.live.append(entry.document != nil)
            log.data.append(entry.document.map { entry.encodedData ?? JSONText.encode($0.data) } ?? "")
            log.hasWriter.append(entry.writer != nil)
            log.writerClients.append(entry.writer?.clientID ?? "")
            log.writerSequences.append(entry.writer.map { Int64(bitPattern: $0.sequence) } ?? 0)
        }
        let statement = Flush(paths: paths, collections: collections, groups: groups, versions: versions, created: created, updated: updated,
                              live: live, data: data, hasWriter: hasWriter, writerClients: writerClients, writerSequences: writerSequences,
                              clients: clients, sequences: sequences, recordVersions: recordVersions, times: times, hasDocument: hasDocument,
                              documents: documents, refused: refused, codes: codes, messages: messages, hasDigest: hasDigest, digests: digests,
                              claimClients: claims.map(\.clientID), claimOwners: claims.map(\.owner), commits: commits, version: Int64(version.rawValue),
                              log: log, notification: notifying.map { CommitNotification.payload(node: $0.node, from: $0.from, through: version, rows: log) })
        var flushed = (passed: false, notified: false)
        for try await answer in try await connection.execute(statement, logger: logger) {
            flushed = answer
        }
        return flushed
    }
}

/// ``PostgresTransaction/flush(over:expectingCommits:to:notifying:logger:)``'s statement, prepared once per
/// connection. The gate takes the counter's lock (waiting for a commit that holds it) and passes
/// only if the counter, as that commit left it, still counts the commits expected; every write
/// reads the gate first, so none happens before the lock is held, or at all when it did not pass.
struct Flush: PostgresPreparedStatement {
    static let name = "tandem_flush_v3"
    static let sql = """
        WITH gate AS (
            SELECT version FROM tandem_counter WHERE id = 1 AND commits = $25::bigint FOR UPDATE
        ), written AS (
            INSERT INTO tandem_documents (path, collection, collection_group, version, create_time, update_time, data, body, mutation_client, mutation_sequence)
            SELECT p, c, g, v, ct, ut,
                CASE WHEN l THEN d END,
                CASE WHEN l AND strpos(d, '\\u0000') = 0 THEN normalize(d, NFC)::jsonb END,
                CASE WHEN w THEN mc END,
                CASE WHEN w THEN ms END
            FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bool[], $8::text[], $9::bool[], $10::text[], $11::bigint[])
                AS t(p, c, g, v, ct, ut, l, d, w, mc, ms)
            WHERE EXISTS (SELECT 1 FROM gate)
            ON CONFLICT (path) DO UPDATE SET version = excluded.version, create_time = excluded.create_time, update_time = excluded.update_time,
                data = excluded.data, body = excluded.body, mutation_client = excluded.mutation_client, mutation_sequence = excluded.mutation_sequence
        ), recorded AS (
            INSERT INTO tandem_mutation_results (client_id, sequence, version, commit_time, document, status, error_code, error_message, digest)
            SELECT c, s, v, t, CASE WHEN hd THEN d END, CASE WHEN r THEN 'refused' END, CASE WHEN r THEN code END, CASE WHEN r THEN message END,
                CASE WHEN hg THEN g END
            FROM unnest($12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bool[], $17::text[], $18::bool[], $19::text[], $20::text[], $21::bool[], $22::bigint[])
                AS x(c, s, v, t, hd, d, r, code, message, hg, g)
            WHERE EXISTS (SELECT 1 FROM gate)
            ON CONFLICT (client_id, sequence) DO UPDATE SET version = excluded.version, commit_time = excluded.commit_time, document = excluded.document,
                status = excluded.status, error_code = excluded.error_code, error_message = excluded.error_message, digest = excluded.digest
        ), claimed AS (
            INSERT INTO tandem_writers (client_id, owner) SELECT * FROM unnest($23::text[], $24::text[]) WHERE EXISTS (SELECT 1 FROM gate)
        ), logged AS (
            INSERT INTO tandem_changes (version, path, create_time, update_time, data, mutation_client, mutation_sequence)
            SELECT v, p, ct, ut, CASE WHEN l THEN d END, CASE WHEN w THEN mc END, CASE WHEN w THEN ms END
            FROM unnest($27::text[], $28::bigint[], $29::bigint[], $30::bigint[], $31::bool[], $32::text[], $33::bool[], $34::text[], $35::bigint[])
                AS t(p, v, ct, ut, l, d, w, mc, ms)
            WHERE EXISTS (SELECT 1 FROM gate)
        ), moved AS (
            UPDATE tandem_counter SET version = $26::bigint, commits = commits + 1 WHERE id = 1 AND EXISTS (SELECT 1 FROM gate)
        )
        SELECT count(*), count(told.sent) FROM gate
            LEFT JOIN LATERAL (SELECT pg_notify('\(PostgresServerStore.channel)', $36::text) IS NULL AS sent WHERE $36::text IS NOT NULL) AS told ON true
        """

    var paths: [String], collections: [String], groups: [String], versions: [Int64], created: [Int64], updated: [Int64]
    var live: [Bool], data: [String], hasWriter: [Bool], writerClients: [String], writerSequences: [Int64]
    var clients: [String], sequences: [Int64], recordVersions: [Int64], times: [Int64], hasDocument: [Bool]
    var documents: [String], refused: [Bool], codes: [String], messages: [String], hasDigest: [Bool], digests: [Int64]
    var claimClients: [String], claimOwners: [String]
    var commits: Int64
    var version: Int64
    var log: Log
    /// The payload of the notification that tells other nodes of the commit; nil for none.
    var notification: String?

    /// The commit log's rows, a column each.
    struct Log {
        var paths: [String] = [], versions: [Int64] = [], created: [Int64] = [], updated: [Int64] = []
        var live: [Bool] = [], data: [String] = [], hasWriter: [Bool] = [], writerClients: [String] = [], writerSequences: [Int64] = []
    }

    func makeBindings() -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 36)
        bindings.append(paths)
        bindings.append(collections)
        bindings.append(groups)
        bindings.append(versions)
        bindings.append(created)
        bindings.append(updated)
        bindings.append(live)
        bindings.append(data)
        bindings.append(hasWriter)
        bindings.append(writerClients)
        bindings.append(writerSequences)
        bindings.append(clients)
        bindings.append(sequences)
        bindings.append(recordVersions)
        bindings.append(times)
        bindings.append(hasDocument)
        bindings.append(documents)
        bindings.append(refused)
        bindings.append(codes)
        bindings.append(messages)
        bindings.append(hasDigest)
        bindings.append(digests)
        bindings.append(claimClients)
        bindings.append(claimOwners)
        bindings.append(commits)
        bindings.append(version)
        bindings.append(log.paths)
        bindings.append(log.versions)
        bindings.append(log.created)
        bindings.append(log.updated)
        bindings.append(log.live)
        bindings.append(log.data)
        bindings.append(log.hasWriter)
        bindings.append(log.writerClients)
        bindings.append(log.writerSequences)
        bindings.append(notification)
        return bindings
    }

    /// Whether the gate passed, and whether the notification went with it.
    func decodeRow(_ row: PostgresRow) throws -> (passed: Bool, notified: Bool) {
        let (passed, notified) = try row.decode((Int64, Int64).self)
        return (passed == 1, notified == 1)
    }
}
