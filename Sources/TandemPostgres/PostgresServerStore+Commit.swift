import Foundation
import Logging
import PostgresNIO
import Synchronization
import TandemCore
import TandemServer

extension PostgresServerStore {
    /// What the drain does: commit requests, or (told of another node's commit) tell this node's
    /// observers of what was committed since it last told them. One drain runs at a time, so the
    /// observers hear of every commit once, in version order.
    enum Work: Sendable {
        case commit(CommitSubmission)
        case catchUp
    }

    /// Queues a catch-up: what other nodes committed reaches this node's observers. One at a time
    /// waits in the queue: those asked for meanwhile are the same read.
    func catchUp() {
        guard catchUpQueued.withLock({ queued in
            defer { queued = true }
            return !queued
        }) else { return }
        Task { _ = try? await submit(.catchUp) }
    }

    /// Queues work for the drain, starting one (in a task of its own, so a writer cancelled while
    /// it waits never stops the others' commit) when none runs.
    func submit(_ work: Work) async throws -> [Result<CommitResult, TandemError>] {
        try await queue.submit(work) {
            Task {
                await self.queue.drain { work, mustReport in
                    await self.drain(work, mustReport: mustReport)
                } idle: {
                    self.publish(CommitNotice(batches: [], visibleThrough: self.published.withLock { $0 }))
                }
            }
        }
    }

    /// One group of the drain: its commits in one transaction (which tells of other nodes' commits
    /// first), or, with none, a catch-up read.
    func drain(_ work: [Work], mustReport: Bool) async -> [Result<[Result<CommitResult, TandemError>], any Error>] {
        var submissions: [CommitSubmission] = []
        for case .commit(let submission) in work { submissions.append(submission) }
        if work.contains(where: { if case .catchUp = $0 { true } else { false } }) {
            catchUpQueued.withLock { $0 = false }
        }
        guard !submissions.isEmpty else {
            await catchUpNow(mustReport: mustReport)
            return work.map { _ in .success([]) }
        }
        var results = await commitTogether(submissions, mustReport: mustReport)[...]
        return work.map { entry in
            guard case .commit = entry else { return .success([]) }
            return results.popFirst()!
        }
    }

    /// Reads what was committed after the version this node last told of, and tells it.
    private func catchUpNow(mustReport: Bool) async {
        let told = published.withLock { $0 }
        do {
            let (changes, current) = try await readingConsistently { connection -> ([RemoteChange], Version) in
                let current = try await Self.counter(connection, logger: self.logger)
                return (try await self.committed(after: told, through: current, over: connection), current)
            }
            guard current > told || mustReport else { return }
            published.withLock { $0 = max($0, current) }
            publish(CommitNotice(batches: Self.batches(changes), visibleThrough: max(current, told)))
        } catch {
            if mustReport { publish(CommitNotice(batches: [], visibleThrough: told)) }
            logger.warning("catching up with other nodes' commits failed: \(Self.reason(error)); the next notification or poll tries again")
        }
    }

    /// The changes of the commits after `told` through `through`, in version order (none when
    /// `through` is not above `told`).
    private func committed(after told: Version, through: Version, over connection: PostgresConnection) async throws -> [RemoteChange] {
        guard through > told else { return [] }
        return try await changes(connection, sql: "SELECT \(Self.documentColumns) FROM tandem_documents AS d WHERE d.version > $1 AND d.version <= $2 ORDER BY d.version, d.path",
                                 binds: Self.binds(Int64(told.rawValue), Int64(through.rawValue)))
    }

    public func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?) async -> [Result<CommitResult, TandemError>] {
        await CommitPlanner.commit(requests, limits: limits, clientID: clientID, authorizer: authorizer) { submission in
            try await submit(.commit(submission))
        }
    }

    /// Decides every queued submission in one transaction, in order, then tells the observers of
    /// what other nodes committed since this node last told them, and of this commit.
    func commitTogether(_ submissions: [CommitSubmission], mustReport: Bool) async -> [Result<[Result<CommitResult, TandemError>], any Error>] {
        let time = ServerTime(WireTimestamp.date(milliseconds: WireTimestamp.milliseconds(configuration.now())))
        let told = published.withLock { $0 }
        do {
            let (answers, last, earlier) = try await withLease { connection in
                try await connection.query("BEGIN", logger: self.logger)
                do {
                    // The counter's lock first: from here until the commit, this is the only commit
                    // on any node, and the versions it takes follow every one visible before it.
                    var start = Version.zero
                    for try await value in try await connection.query("SELECT version FROM tandem_counter WHERE id = 1 FOR UPDATE", logger: self.logger).decode(Int64.self) {
                        start = Version(UInt64(value))
                    }
                    // Commits of other nodes this one has not told its observers of yet.
                    let earlier = try await self.committed(after: told, through: start, over: connection)
                    var transaction = try await PostgresTransaction.prefetch(submissions.flatMap(\.requests), over: connection, logger: self.logger)
                    let (answers, version) = try CommitPlanner.decide(submissions, in: &transaction, time: time, after: start)
                    try await transaction.flush(over: connection, logger: self.logger)
                    if version != start {
                        try await connection.query("UPDATE tandem_counter SET version = \(Int64(version.rawValue)) WHERE id = 1", logger: self.logger)
                    }
                    try await connection.query("COMMIT", logger: self.logger)
                    if version != start {
                        // A wake-up for the other nodes, after the commit in a statement of its own
                        // (inside the transaction it would take a lock every commit waits for).
                        // Lost, it costs them a poll's delay, nothing more.
                        _ = try? await connection.query("SELECT pg_notify(\(Self.channel), \("\(self.node):\(version.rawValue)"))", logger: self.logger)
                    }
                    return (answers, version, earlier)
                } catch {
                    _ = try? await connection.query("ROLLBACK", logger: self.logger)
                    throw error
                }
            }
            // Durable and visible now: tell the observers, in version order, before answering.
            var batches = Self.batches(earlier)
            for results in answers {
                for case .success(let result) in results {
                    if let batch = result.batch, !batch.changes.isEmpty { batches.append(batch) }
                }
            }
            published.withLock { $0 = max($0, last) }
            if last != told || !batches.isEmpty || mustReport { publish(CommitNotice(batches: batches, visibleThrough: last)) }
            return answers.map { .success($0) }
        } catch {
            // PostgreSQL refused data of a request (a NUL character in a path, writer id or
            // message, which its text cannot hold): each submission goes alone, so only the one
            // holding it fails, with an error that says not to send it again.
            if Self.isDataError(error) {
                if submissions.count > 1 {
                    var results: [Result<[Result<CommitResult, TandemError>], any Error>] = []
                    for (index, submission) in submissions.enumerated() {
                        results += await commitTogether([submission], mustReport: mustReport && index == submissions.count - 1)
                    }
                    return results
                }
                if mustReport { publish(CommitNotice(batches: [], visibleThrough: told)) }
                return [.failure(TandemError(.invalidArgument, "PostgreSQL cannot store this write: \(Self.reason(error)). A path, writer id or message with a NUL character cannot be kept in PostgreSQL; nothing was written. Do not send it again as it is."))]
            }
            if mustReport { publish(CommitNotice(batches: [], visibleThrough: told)) }
            let failure = TandemError(.unavailable, "The server database failed to commit: \(Self.reason(error)). Nothing was written; retry.", cause: error)
            logger.error("commit failed: \(Self.reason(error))")
            return submissions.map { _ in .failure(failure) }
        }
    }

    /// Whether PostgreSQL refused the data itself (SQLSTATE class 22, "data exception"): sending
    /// the same again fails the same way.
    static func isDataError(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return state.hasPrefix("22")
    }

    /// Changes in version order, grouped into one batch per version.
    static func batches(_ changes: [RemoteChange]) -> [CommittedBatch] {
        var batches: [CommittedBatch] = []
        for change in changes {
            if batches.last?.version == change.version {
                batches[batches.count - 1].changes.append(change)
            } else {
                batches.append(CommittedBatch(version: change.version, changes: [change]))
            }
        }
        return batches
    }
}

/// ``StoreTransaction`` over what one commit's requests can read, fetched before they are decided
/// (each request reads only the documents it writes and the records of its own ids), and what they
/// write, kept until ``flush(over:logger:)`` writes it in a few statements.
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
    var recorded: [MutationID: MutationRecord] = [:]
    var recordedOrder: [MutationID] = []
    var claims: [(clientID: String, owner: String)] = []

    /// Reads what `requests` can ask for.
    static func prefetch(_ requests: [CommitPlanner.CheckedRequest], over connection: PostgresConnection, logger: Logger) async throws -> PostgresTransaction {
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
        for try await row in try await connection.query("""
            SELECT \(unescaped: PostgresServerStore.documentColumns) FROM tandem_documents AS d WHERE d.path = ANY(\(pathList)) AND d.data IS NOT NULL
            """, logger: logger) {
            if let change = try PostgresServerStore.change(row.makeRandomAccess(), from: 0), let document = change.document {
                transaction.documents[change.path] = .some(document)
            }
        }
        guard !clients.isEmpty else { return transaction }
        let clientList = Array(clients)
        for try await (client, sequence) in try await connection.query("""
            SELECT client_id, max(sequence) FROM tandem_mutation_results WHERE client_id = ANY(\(clientList)) GROUP BY client_id
            """, logger: logger).decode((String, Int64).self) {
            transaction.highest[client] = UInt64(bitPattern: sequence)
        }
        for try await (client, sequence) in try await connection.query("""
            SELECT client_id, sequence FROM tandem_pruned_clients WHERE client_id = ANY(\(clientList))
            """, logger: logger).decode((String, Int64).self) {
            transaction.pruned[client] = UInt64(bitPattern: sequence)
        }
        for try await (client, owner) in try await connection.query("""
            SELECT client_id, owner FROM tandem_writers WHERE client_id = ANY(\(clientList))
            """, logger: logger).decode((String, String).self) {
            transaction.owners[client] = owner
        }
        let idClients = ids.map(\.clientID)
        let idSequences = ids.map { Int64(bitPattern: $0.sequence) }
        for try await (client, sequence, version, time, document, status, code, message, digest) in try await connection.query("""
            SELECT r.client_id, r.sequence, r.version, r.commit_time, r.document, r.status, r.error_code, r.error_message, r.digest
            FROM tandem_mutation_results AS r JOIN unnest(\(idClients)::text[], \(idSequences)::bigint[]) AS wanted(client_id, sequence)
                ON r.client_id = wanted.client_id AND r.sequence = wanted.sequence
            """, logger: logger).decode((String, Int64, Int64, Int64, String?, String?, String?, String?, Int64?).self) {
            let id = MutationID(clientID: client, sequence: UInt64(bitPattern: sequence))
            let at = Version(UInt64(version))
            let acknowledgement: WriteAcknowledgement
            if status == WriteStatus.refused.rawValue {
                acknowledgement = .refused(id, TandemError(TandemError.Code(rawValue: code ?? "unknown"), message ?? ""), at: at)
            } else if let document {
                acknowledgement = WriteAcknowledgement(id: id, version: at, document: try Document(wire: try JSONText.parse(document)))
            } else {
                acknowledgement = WriteAcknowledgement(id: id, version: at, document: nil)
            }
            transaction.records[id] = MutationRecord(acknowledgement: acknowledgement, digest: digest.map { UInt64(bitPattern: $0) },
                                                     time: WireTimestamp.date(milliseconds: time))
        }
        return transaction
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
        written[path] = Written(document: document, version: version, time: time, encodedData: encodedData, writer: writer)
    }

    mutating func record(_ record: MutationRecord, for id: MutationID) throws {
        if recorded[id] == nil { recordedOrder.append(id) }
        recorded[id] = record
        records[id] = record
        highest[id.clientID] = max(highest[id.clientID] ?? 0, id.sequence)
    }

    /// Writes what the requests wrote: documents, records and claims, a statement each.
    func flush(over connection: PostgresConnection, logger: Logger) async throws {
        if !writtenOrder.isEmpty {
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
            try await connection.query("""
                INSERT INTO tandem_documents (path, collection, collection_group, version, create_time, update_time, data, body, mutation_client, mutation_sequence)
                SELECT p, c, g, v, ct, ut,
                    CASE WHEN l THEN d END,
                    CASE WHEN l AND strpos(d, '\\u0000') = 0 THEN normalize(d, NFC)::jsonb END,
                    CASE WHEN w THEN mc END,
                    CASE WHEN w THEN ms END
                FROM unnest(\(paths)::text[], \(collections)::text[], \(groups)::text[], \(versions)::bigint[], \(created)::bigint[], \(updated)::bigint[],
                            \(live)::bool[], \(data)::text[], \(hasWriter)::bool[], \(writerClients)::text[], \(writerSequences)::bigint[])
                    AS t(p, c, g, v, ct, ut, l, d, w, mc, ms)
                ON CONFLICT (path) DO UPDATE SET version = excluded.version, create_time = excluded.create_time, update_time = excluded.update_time,
                    data = excluded.data, body = excluded.body, mutation_client = excluded.mutation_client, mutation_sequence = excluded.mutation_sequence
                """, logger: logger)
        }
        if !recordedOrder.isEmpty {
            var clients: [String] = [], sequences: [Int64] = [], versions: [Int64] = [], times: [Int64] = []
            var hasDocument: [Bool] = [], documents: [String] = [], refused: [Bool] = [], codes: [String] = [], messages: [String] = []
            var hasDigest: [Bool] = [], digests: [Int64] = []
            for id in recordedOrder {
                let record = recorded[id]!
                let answer = record.acknowledgement
                clients.append(id.clientID)
                sequences.append(Int64(bitPattern: id.sequence))
                versions.append(Int64(answer.version.rawValue))
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
            try await connection.query("""
                INSERT INTO tandem_mutation_results (client_id, sequence, version, commit_time, document, status, error_code, error_message, digest)
                SELECT c, s, v, t, CASE WHEN hd THEN d END, CASE WHEN r THEN 'refused' END, CASE WHEN r THEN code END, CASE WHEN r THEN message END,
                    CASE WHEN hg THEN g END
                FROM unnest(\(clients)::text[], \(sequences)::bigint[], \(versions)::bigint[], \(times)::bigint[], \(hasDocument)::bool[], \(documents)::text[],
                            \(refused)::bool[], \(codes)::text[], \(messages)::text[], \(hasDigest)::bool[], \(digests)::bigint[])
                    AS x(c, s, v, t, hd, d, r, code, message, hg, g)
                ON CONFLICT (client_id, sequence) DO UPDATE SET version = excluded.version, commit_time = excluded.commit_time, document = excluded.document,
                    status = excluded.status, error_code = excluded.error_code, error_message = excluded.error_message, digest = excluded.digest
                """, logger: logger)
        }
        if !claims.isEmpty {
            let clients = claims.map(\.clientID)
            let owners = claims.map(\.owner)
            try await connection.query("""
                INSERT INTO tandem_writers (client_id, owner) SELECT * FROM unnest(\(clients)::text[], \(owners)::text[])
                """, logger: logger)
        }
    }
}
