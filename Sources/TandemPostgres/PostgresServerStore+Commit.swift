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

/// When one catch-up was woken (nil: by its poll, or by a read still to do), began, and told its
/// observers of the commits through `through`, and whether it read them or its notifications
/// carried them: for the benchmark's account of the time a commit takes to reach another node's
/// listeners.
package struct CatchUpTiming: Sendable {
    package var woken: ContinuousClock.Instant?
    package var started: ContinuousClock.Instant
    package var told: ContinuousClock.Instant
    package var through: Version
    package var rows: Int
    /// Whether it read the commit log (false: the notifications carried the commits it told).
    package var read: Bool
}
