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
    /// waits in the queue: those asked for meanwhile are the same one.
    func catchUp() {
        guard heardCommits.withLock({ heard in
            defer { heard.queued = true }
            return !heard.queued
        }) else { return }
        Task { _ = try? await submit(.catchUp) }
    }

    /// Queues a catch-up that reads the commit log: a wake-up or a poll asked for it.
    func readCommitLog() {
        heardCommits.withLock { $0.readWanted = true }
        catchUp()
    }

    /// Keeps a commit another node's notification carried, and queues a catch-up to tell it.
    func heard(_ range: CommitNotification.CommittedRange) {
        let now = ContinuousClock.now
        heardCommits.withLock { heard in
            heard.keep(range)
            heard.woken = heard.woken ?? now
        }
        catchUp()
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
            heardCommits.withLock { $0.queued = false }
        }
        guard !submissions.isEmpty else {
            await catchUpNow(mustReport: mustReport)
            return work.map { _ in .success([]) }
        }
        groupSizes.publish(submissions.count)
        var results = await commitTogether(submissions, mustReport: mustReport)[...]
        return work.map { entry in
            guard case .commit = entry else { return .success([]) }
            return results.popFirst()!
        }
    }

    /// The most versions one catch-up reads: a node far behind catches up in steps, each told
    /// as it is read, instead of holding the whole gap at once.
    static let catchUpSpan: Int64 = 2_048

    /// Tells the commits other nodes' notifications carried that follow the version this node
    /// last told of, one after the other; then, when a notification asked for it (a wake-up, a
    /// poll) or one left a gap, reads the commits after that from the commit log, and tells them.
    /// One statement, so one snapshot: the counter and the commits through it agree. When the log
    /// no longer holds all of them (this node was cut off for longer than it kept them), it reads
    /// from where the log begins and says so (`incomplete`): its listeners load again.
    private func catchUpNow(mustReport: Bool) async {
        let started = ContinuousClock.now
        let before = published.withLock { $0 }
        let heard = heardCommits.withLock { $0.take(after: before) }
        if heard.through > before {
            published.withLock { $0 = max($0, heard.through) }
            publish(CommitNotice(batches: Self.batches(heard.changes), visibleThrough: heard.through))
            catchUpTimings.publish(CatchUpTiming(woken: heard.woken, started: started, told: .now, through: heard.through, rows: heard.changes.count, read: false))
        }
        let told = heard.through
        guard heard.read else {
            if mustReport && told == before { publish(CommitNotice(batches: [], visibleThrough: told)) }
            return
        }
        logReads.add(1, ordering: .relaxed)
        let woken = told > before ? nil : heard.woken
        do {
            let from = Int64(told.rawValue)
            let (changes, current, newest, prunedThrough) = try await withDrainConnection { connection -> ([RemoteChange], Version, Version, Version) in
                var changes: [RemoteChange] = []
                var current = told
                var newest = told
                var prunedThrough = Version.zero
                for try await row in try await connection.query("""
                    SELECT c.version, m.value, least(c.version, greatest(\(from), m.value) + \(Self.catchUpSpan)), \(unescaped: Self.documentColumns)
                    FROM tandem_counter AS c CROSS JOIN tandem_meta AS m
                    LEFT JOIN tandem_changes AS d ON d.version > greatest(\(from), m.value)
                        AND d.version <= least(c.version, greatest(\(from), m.value) + \(Self.catchUpSpan))
                    WHERE c.id = 1 AND m.key = 'log_pruned_through' ORDER BY d.version, d.path
                    """, logger: self.logger) {
                    let cells = row.makeRandomAccess()
                    newest = Version(UInt64(try cells[0].decode(Int64.self)))
                    prunedThrough = Version(UInt64(try cells[1].decode(Int64.self)))
                    current = Version(UInt64(try cells[2].decode(Int64.self)))
                    if let change = try Self.change(cells, from: 3) { changes.append(change) }
                }
                return (changes, current, newest, prunedThrough)
            }
            let incomplete = prunedThrough > told
            if incomplete { logger.error("this node was cut off from the database for longer than the commit log kept what it had not read (through \(prunedThrough)); its listeners load again") }
            if current > told || (mustReport && told == before) || incomplete {
                published.withLock { $0 = max($0, current) }
                publish(CommitNotice(batches: Self.batches(changes), visibleThrough: max(current, told), incomplete: incomplete))
            }
            catchUpTimings.publish(CatchUpTiming(woken: woken, started: started, told: .now, through: current, rows: changes.count, read: true))
            // Far behind: the next step at once.
            if newest > current { readCommitLog() }
        } catch {
            if mustReport && told == before { publish(CommitNotice(batches: [], visibleThrough: told)) }
            logger.warning("catching up with other nodes' commits failed: \(Self.reason(error)); the next notification or poll tries again")
        }
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
            let (answers, last, earlier, incomplete) = try await withDrainConnection { connection in
                let requests = submissions.flatMap(\.requests)
                // First without a transaction: read, decide, then write only if no commit came
                // between (one statement each, two round trips). Should one have come, again
                // under the counter's lock, which cannot miss.
                if let decided = try await self.commitUnlocked(submissions, requests: requests, told: told, time: time, over: connection) {
                    return decided
                }
                self.conflicts.add(1, ordering: .relaxed)
                return try await self.commitLocked(submissions, requests: requests, told: told, time: time, over: connection)
            }
            // Durable and visible now: tell the observers, in version order, before answering.
            var batches = Self.batches(earlier)
            for results in answers {
                for case .success(let result) in results {
                    if let batch = result.batch, !batch.changes.isEmpty { batches.append(batch) }
                }
            }
            published.withLock { $0 = max($0, last) }
            if incomplete { logger.error("this node was cut off from the database for longer than the commit log kept what it had not read (through \(last)); its listeners load again") }
            if last != told || !batches.isEmpty || mustReport || incomplete {
                publish(CommitNotice(batches: batches, visibleThrough: last, incomplete: incomplete))
            }
            return answers.map { .success($0) }
        } catch {
            // PostgreSQL refused data of a request (a NUL character in a path, writer id or
            // message, which its text cannot hold): each submission goes alone, then each request
            // of it, so only the one holding it fails, with an error that says not to send it
            // again (a call's pipelined writes, or a message's writes decided one by one, are
            // requests of one submission).
            if Self.isDataError(error) {
                if submissions.count > 1 {
                    var results: [Result<[Result<CommitResult, TandemError>], any Error>] = []
                    for (index, submission) in submissions.enumerated() {
                        results += await commitTogether([submission], mustReport: mustReport && index == submissions.count - 1)
                    }
                    return results
                }
                if let submission = submissions.first, submission.requests.count > 1 {
                    var answers: [Result<CommitResult, TandemError>] = []
                    for (index, request) in submission.requests.enumerated() {
                        var alone = submission
                        alone.requests = [request]
                        switch await commitTogether([alone], mustReport: mustReport && index == submission.requests.count - 1).first {
                        case .success(let results)?:
                            answers += results
                        case .failure(let failure)?:
                            answers.append(.failure(failure as? TandemError ?? TandemError(.unavailable, "The server database failed to commit: \(Self.reason(failure)). Nothing was written; retry.", cause: failure)))
                        case nil:
                            answers.append(.failure(TandemError(.internal, "The write was not decided. Nothing was written; retry.")))
                        }
                    }
                    return [.success(answers)]
                }
                if mustReport { publish(CommitNotice(batches: [], visibleThrough: told)) }
                return [.failure(TandemError(.invalidArgument, "PostgreSQL cannot store this write: \(Self.reason(error)). A path, writer id or message with a NUL character cannot be kept in PostgreSQL; nothing was written. Do not send it again as it is."))]
            }
            if mustReport { publish(CommitNotice(batches: [], visibleThrough: told)) }
            let failure = error as? TandemError ?? TandemError(.unavailable, "The server database failed to commit: \(Self.reason(error)). Nothing was written; retry.", cause: error)
            logger.error("commit failed: \(Self.reason(error))")
            return submissions.map { _ in .failure(failure) }
        }
    }

    typealias Decided = (answers: [[Result<CommitResult, TandemError>]], last: Version, earlier: [RemoteChange], incomplete: Bool)

    /// Reads what the requests can read in one statement (one snapshot), decides them, and writes
    /// what they wrote in one statement that first takes the counter's lock and checks that no
    /// commit came since the read (the counter's `commits` moved), writing nothing if one did.
    /// Nil when one did. Each statement commits on its own: the write's is the commit.
    private func commitUnlocked(_ submissions: [CommitSubmission], requests: [CommitPlanner.CheckedRequest], told: Version, time: ServerTime,
                                over connection: PostgresConnection) async throws -> Decided? {
        var (transaction, read) = try await PostgresTransaction.prefetch(requests, earlierAfter: told, over: connection, logger: logger)
        let (answers, version) = try CommitPlanner.decide(submissions, in: &transaction, time: time, after: read.version)
        // Nothing written (every request a replay answered from its record, or refused before
        // it wrote): the answers hold as of the read, with no lock to take.
        guard transaction.writes || version != read.version else { return (answers, version, read.earlier, read.logPrunedThrough > told) }
        if let hook = betweenReadAndWrite.withLock({ $0 }) { await hook.body() }
        guard try await flush(transaction, after: read, to: version, over: connection) else { return nil }
        return (answers, version, read.earlier, read.logPrunedThrough > told)
    }

    /// The same in a transaction holding the counter's lock from the start: from then until the
    /// commit, this is the only commit on any node, and the versions it takes follow every one
    /// visible before it.
    private func commitLocked(_ submissions: [CommitSubmission], requests: [CommitPlanner.CheckedRequest], told: Version, time: ServerTime,
                              over connection: PostgresConnection) async throws -> Decided {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT version FROM tandem_counter WHERE id = 1 FOR UPDATE", logger: logger)
            var (transaction, read) = try await PostgresTransaction.prefetch(requests, earlierAfter: told, over: connection, logger: logger)
            let (answers, version) = try CommitPlanner.decide(submissions, in: &transaction, time: time, after: read.version)
            if transaction.writes || version != read.version {
                guard try await flush(transaction, after: read, to: version, over: connection) else {
                    throw TandemError(.internal, "The version counter moved while this commit held its lock.")
                }
            }
            try await connection.query("COMMIT", logger: logger)
            return (answers, version, read.earlier, read.logPrunedThrough > told)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Writes what `transaction` wrote (``PostgresTransaction/flush(over:expectingCommits:to:notifying:logger:)``)
    /// and, when other nodes listen (``otherNodesListening``), tells them of the commit in the
    /// same statement. Returns whether it was written (false: another commit came since `read`).
    private func flush(_ transaction: PostgresTransaction, after read: PostgresTransaction.Read, to version: Version,
                       over connection: PostgresConnection) async throws -> Bool {
        let notifying = otherNodesListening && version > read.version ? (node: node, from: read.version) : nil
        let flushed = try await transaction.flush(over: connection, expectingCommits: read.commits, to: version, notifying: notifying, logger: logger)
        if flushed.notified { wakeUpsSent.add(1, ordering: .relaxed) }
        return flushed.passed
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

/// When one catch-up was woken (nil: by its poll, or by a read still to do), began, and told its
/// observers of the commits through `through`, and whether it read them or its notifications
/// carried them: for the benchmark's account of the time a commit
/// takes to reach another node's listeners.
package struct CatchUpTiming: Sendable {
    package var woken: ContinuousClock.Instant?
    package var started: ContinuousClock.Instant
    package var told: ContinuousClock.Instant
    package var through: Version
    package var rows: Int
    /// Whether it read the commit log (false: the notifications carried the commits it told).
    package var read: Bool
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
