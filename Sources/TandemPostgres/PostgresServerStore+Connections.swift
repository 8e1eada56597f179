import Foundation
import Logging
import PostgresNIO
import Synchronization
import TandemCore
import TandemServer

// The connections a node runs its statements on, each statement under a deadline: PostgreSQL
// restarting, or a network that drops packets without a word, must fail a statement with
// `unavailable`, never leave it (and the commits queued behind it, and the shutdown that waits
// for them) waiting for an answer that does not come.
extension PostgresServerStore {
    /// Runs `body`, closing `connection` if it has not returned within `statementTimeout`: the
    /// statement under way then fails, and so does `body`. A connection closed this way is not
    /// used again (the pool and the drain open another).
    func withDeadline<T>(on connection: PostgresConnection, _ body: () async throws -> T) async throws -> T {
        let timeout = configuration.statementTimeout
        let expired = Atomic<Bool>(false)
        let logger = self.logger
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            expired.store(true, ordering: .relaxed)
            logger.warning("a statement to PostgreSQL had no answer within \(timeout); closing its connection")
            try? await connection.close()
        }
        defer { watchdog.cancel() }
        do {
            return try await body()
        } catch {
            guard expired.load(ordering: .relaxed) else { throw error }
            throw TandemError(.unavailable, "PostgreSQL did not answer within \(timeout): the database is down, restarting or unreachable. Retry.", cause: error)
        }
    }

    /// Runs `body` on the drain's own connection, outside the pool: commits and catch-ups run one
    /// at a time (``GroupCommitQueue``), so one connection serves them, without a lease for each.
    /// Opened when there is none, within `connectTimeout` or `unavailable`; after any failure it is
    /// closed (a transaction it left open must not meet the next commit) and the next opens another.
    /// `body` runs under the statement deadline (``withDeadline(on:_:)``).
    func withDrainConnection<T>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection: PostgresConnection
        if let open = drainConnection.withLock({ $0 }), !open.isClosed {
            connection = open
        } else {
            do {
                connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(connectTimeout: configuration.connectTimeout),
                                                                  id: drainConnections.add(1, ordering: .relaxed).newValue, logger: logger)
            } catch {
                throw TandemError(.unavailable, "Could not connect to PostgreSQL at \(url): \(Self.reason(error)). Nothing was done; retry.", cause: error)
            }
            drainConnection.withLock { $0 = connection }
        }
        do {
            return try await withDeadline(on: connection) { try await body(connection) }
        } catch {
            drainConnection.withLock { if $0 === connection { $0 = nil } }
            try? await connection.close()
            throw error
        }
    }

    /// Runs `body` on a connection of the pool, once one is free. When none is within
    /// `connectionWait` (PostgreSQL is down or unreachable: the pool keeps trying to connect, and
    /// a lease would wait for it), fails with `unavailable` instead of waiting on; a `body` that
    /// started runs under the statement deadline (``withDeadline(on:_:)``).
    func withLease<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let state = LeaseState()
        let answer = Ticket<T>()
        // Neither the lease nor the timer is waited for once the other answered: a lease the pool
        // is slow to give up must not hold the caller past `connectionWait`.
        let lease = Task {
            do {
                answer.fulfill(.success(try await self.client.withConnection { connection in
                    // Given up on meanwhile: the caller was told nothing was done, so nothing is.
                    guard state.start() else { throw CancellationError() }
                    return try await self.withDeadline(on: connection) { try await body(connection) }
                }))
            } catch {
                answer.fulfill(.failure(error))
            }
        }
        let wait = configuration.connectionWait
        let url = self.url
        let timer = Task {
            try await Task.sleep(for: wait)
            guard state.abandon() else { return }
            lease.cancel()
            answer.fulfill(.failure(TandemError(.unavailable, "No connection to PostgreSQL at \(url) within \(wait): the database is down or unreachable. Nothing was done; retry.")))
        }
        defer { timer.cancel() }
        return try await answer.value()
    }

    /// Runs `body` on a connection of the pool (``withLease(_:)``); what PostgreSQL or the network
    /// fails with is `unavailable`.
    func reading<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await withLease(body)
        } catch let error as TandemError {
            throw error
        } catch is CancellationError {
            throw TandemError(.cancelled, "The read was cancelled.")
        } catch {
            throw TandemError(.unavailable, "The server database failed to read: \(Self.reason(error)).", cause: error)
        }
    }

    /// As ``reading(_:)``, in one read-only snapshot (REPEATABLE READ) across its statements.
    func readingConsistently<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await reading { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: self.logger)
            do {
                let result = try await body(connection)
                try await connection.query("COMMIT", logger: self.logger)
                return result
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: self.logger)
                throw error
            }
        }
    }
}

/// Whether a lease's body started, or the caller gave up on it first (``PostgresServerStore/withLease(_:)``).
private final class LeaseState: Sendable {
    private enum State { case waiting, started, abandoned }
    private let state = Mutex(State.waiting)

    /// Marks the body started; false when the caller gave up first.
    func start() -> Bool { move(to: .started) }

    /// Marks the lease given up on; false when its body started first.
    func abandon() -> Bool { move(to: .abandoned) }

    private func move(to next: State) -> Bool {
        state.withLock { state in
            guard state == .waiting else { return false }
            state = next
            return true
        }
    }
}
