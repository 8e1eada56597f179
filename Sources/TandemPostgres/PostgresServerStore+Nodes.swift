import Foundation
import Logging
import PostgresNIO
import Synchronization
import TandemCore
import TandemServer

// How nodes on one database learn each other's commits. Each commit writes its changes, whole,
// to the commit log (`tandem_changes`) in the transaction that makes it visible; a node reads the
// log after the version it last told its observers of, so it tells every commit of every node,
// whole and in version order, as the node that made it does. Each commit notifies the other
// nodes in its own statement, carrying the commit itself when it fits in a notification: a node
// that has told every commit before it tells it at once, without reading; one that finds a gap
// before it, or is woken without the commit, reads the log. Notifications may be lost: each poll
// reads anyway. Each node says it is there, and how far
// it has read, at each poll (`tandem_nodes`); the log keeps what some node running has not read,
// and one node at a time trims the rest.
extension PostgresServerStore {
    /// The end of a notification that says only that its node is there (``announce(over:)``).
    static let presence = ":here"

    /// Trims the commit log every this many polls (one node at a time does): every 10 s by
    /// default, more often when `nodeTimeout` is short.
    var trimEvery: Int {
        let polls = configuration.nodeTimeout / configuration.pollInterval
        return max(1, min(10, Int(polls / 2)))
    }

    /// Trims the commit log on a connection of the pool, off the listening loop (a catch-up never
    /// waits for it), unless a trim of this node's is under way.
    func trimInBackground() {
        guard trimming.exchange(true, ordering: .acquiringAndReleasing) == false else { return }
        Task {
            defer { trimming.store(false, ordering: .releasing) }
            do {
                try await trimCommitLog()
            } catch {
                logger.warning("trimming the commit log failed: \(Self.reason(error)); the next poll tries again")
            }
        }
    }

    /// Records that `node` runs, having read everything through the counter, and returns the
    /// counter, in one statement: the commit log keeps what comes after it for this node from now.
    static func register(_ node: String, over connection: PostgresConnection, logger: Logger) async throws -> Version {
        var version = Version.zero
        for try await value in try await connection.query("""
            INSERT INTO tandem_nodes (node, read_through, seen_at) SELECT \(node), version, now() FROM tandem_counter WHERE id = 1
            RETURNING read_through
            """, logger: logger).decode(Int64.self) {
            version = Version(UInt64(value))
        }
        return version
    }

    /// Tells this node's observers of what other nodes commit. On a connection of its own (not the
    /// pool's, whose wait for a connection a shutdown could not end): LISTEN first, then say this
    /// node is there and read what was committed since this node last told (``catchUp()``), then
    /// wait for a notification, or `pollInterval` without one (a lost notification costs that
    /// delay), and read again; each poll also says again that this node is there, which checks the
    /// connection. After any failure, a new connection does the same, in the same order, so
    /// nothing committed meanwhile is missed. Cancelled, it closes its connection and returns.
    func follow() async {
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            do {
                let connection: PostgresConnection
                do {
                    connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(connectTimeout: configuration.connectTimeout, statementTimeout: configuration.statementTimeout),
                                                                      id: 1_000_000 + attempt, logger: logger)
                } catch {
                    throw TandemError(.unavailable, "Could not connect to PostgreSQL at \(url): \(Self.reason(error)).", cause: error)
                }
                do {
                    try await withTaskCancellationHandler {
                        try await listen(over: connection)
                    } onCancel: {
                        Task { try? await connection.close() }
                    }
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if Task.isCancelled { return }
                logger.warning("listening for other nodes' commits failed: \(Self.reason(error)); listening again in \(configuration.pollInterval)")
                try? await configuration.clock.sleep(for: configuration.pollInterval)
            }
        }
    }

    private func listen(over connection: PostgresConnection) async throws {
        listeningConnection.withLock { $0 = connection }
        defer { listeningConnection.withLock { if $0 === connection { $0 = nil } } }
        // LISTEN itself under the deadline too: unanswered, the connection is closed, which ends
        // the wait, and the node listens again on another.
        let started = Flag()
        let deadline = configuration.statementTimeout * 2 + .seconds(2)
        let watchdog = Task {
            try await Task.sleep(for: deadline)
            if !started.lower() { connection.close().whenComplete { _ in } }
        }
        defer { watchdog.cancel() }
        try await connection.listen(on: Self.channel) { notifications in
            started.raise()
            // Each wake-up reads again; the poll's also says again that this node is there (a
            // notification shows the connection alive, so only the poll checks it), and so does one
            // for a node heard for the first time (or again after a silence): one that started
            // listening after this node last said so learns of it now, not at this node's next
            // poll. Wake-ups that come together become one, which announces if any of them asked to.
            let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            let announcing = Flag()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await notification in notifications {
                        guard let heard = CommitNotification(payload: notification.payload, ignoring: self.node) else { continue }
                        if self.heardOtherNode(heard.sender) {
                            announcing.raise()
                            wake.yield()
                        }
                        switch heard {
                        case .presence:
                            break
                        case .wake:
                            let now = ContinuousClock.now
                            self.heardCommits.withLock { $0.woken = $0.woken ?? now }
                            wake.yield()
                        case .commit(_, let range):
                            // The commit itself: told without reading, when it follows what
                            // this node told last.
                            self.heard(range)
                        }
                    }
                    throw TandemError(.unavailable, "The connection listening for other nodes' commits closed.")
                }
                group.addTask {
                    while true {
                        try await self.configuration.clock.sleep(for: self.configuration.pollInterval)
                        self.others.withLock { $0.polls += 1 }
                        announcing.raise()
                        wake.yield()
                    }
                }
                group.addTask {
                    try await self.announce(over: connection)
                    self.readCommitLog()
                    var announced = 1
                    for await _ in wakes {
                        if announcing.lower() {
                            try await self.announce(over: connection)
                            announced += 1
                            if announced % self.trimEvery == 0 { self.trimInBackground() }
                        }
                        self.readCommitLog()
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// A request raised by some tasks and taken down by another, for ``follow()``.
    private final class Flag: Sendable {
        private let raised = Atomic<Bool>(false)
        func raise() { raised.store(true, ordering: .releasing) }
        /// Lowers the flag, and returns whether it was raised.
        func lower() -> Bool { raised.exchange(false, ordering: .acquiringAndReleasing) }
    }

    /// Whether another node has said it is there within the last three polls of this one: only
    /// then do this node's commits notify other nodes (``CommitNotification``). A node alone sends
    /// no notifications; one that starts says so at once, the nodes that hear it answer at once, and a
    /// commit it hears of no sooner is found by its first read, or its poll.
    package var otherNodesListening: Bool {
        others.withLock { state in state.heardAt.values.contains { state.polls - $0 <= 3 } }
    }

    /// Notes that `sender` is there, and returns whether it is new: not heard within the last
    /// three polls (then this node answers with its own presence).
    func heardOtherNode(_ sender: Substring) -> Bool {
        let (new, first) = others.withLock { state -> (Bool, Bool) in
            let polls = state.polls
            let first = !state.heardAt.values.contains { polls - $0 <= 3 }
            let new = state.heardAt[sender].map { polls - $0 > 3 } ?? true
            // Nodes silent for long are forgotten, so nodes that come and go leave nothing behind.
            if new { state.heardAt = state.heardAt.filter { polls - $0.value <= 3 } }
            state.heardAt[sender] = polls
            return (new, first)
        }
        if first, let hook = otherNodeHeard.withLock({ $0 }) { Task { await hook.body() } }
        return new
    }

    /// Tells the other nodes this one is there, and records in `tandem_nodes` that it is, with the
    /// newest version it has told of (the commit log keeps what it has not read), on the
    /// listening connection, which this checks: one that does not answer within the statement
    /// deadline is closed, which ends the wait for its notifications, and the node listens again
    /// on another. Not flushed to disk: it matters only while the node runs.
    private func announce(over connection: PostgresConnection) async throws {
        let told = Int64(published.withLock { $0 }.rawValue)
        try await withDeadline(on: connection) {
            try await connection.query("""
                WITH beat AS (
                    INSERT INTO tandem_nodes (node, read_through, seen_at) VALUES (\(self.node), \(told), now())
                    ON CONFLICT (node) DO UPDATE SET read_through = excluded.read_through, seen_at = excluded.seen_at
                )
                SELECT set_config('synchronous_commit', 'off', true), pg_notify(\(Self.channel), \("\(self.node)\(Self.presence)"))
                """, logger: self.logger)
        }
    }

    /// Drops the commit log's rows that every node running has read (a node not heard from for
    /// `nodeTimeout` no longer counts, and is forgotten), and notes how far it did: a node that
    /// comes back behind that point has missed commits it can no longer read, and has its
    /// listeners load again (``CommitNotice/incomplete``). One node at a time (an advisory lock);
    /// the others skip their turn. On a connection of the pool, under the statement deadline.
    package func trimCommitLog() async throws {
        let timeout = Double(configuration.nodeTimeout.components.seconds) + Double(configuration.nodeTimeout.components.attoseconds) / 1e18
        try await withLease { connection in
            try await connection.query("""
                WITH turn AS (SELECT pg_try_advisory_xact_lock(\(Self.logLock)) AS taken),
                floor AS (
                    SELECT min(least(n.read_through, (SELECT version FROM tandem_counter WHERE id = 1))) AS through
                    FROM tandem_nodes AS n, turn WHERE turn.taken AND n.seen_at > now() - make_interval(secs => \(timeout))
                ),
                gone AS (DELETE FROM tandem_changes WHERE version <= (SELECT through FROM floor)),
                forgotten AS (DELETE FROM tandem_nodes WHERE (SELECT taken FROM turn) AND seen_at <= now() - make_interval(secs => \(timeout))),
                moved AS (
                    UPDATE tandem_meta SET value = greatest(value, (SELECT through FROM floor))
                    WHERE key = 'log_pruned_through' AND (SELECT through FROM floor) IS NOT NULL
                )
                SELECT 1
                """, logger: self.logger)
        }
    }
}
