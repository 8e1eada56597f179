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
    /// Runs `body`, and fails with `unavailable` if it has not returned within twice
    /// `statementTimeout` and 2 s (a commit runs two statements, and PostgreSQL cancels each at
    /// `statementTimeout`, the session's `statement_timeout`: its transaction rolls back, and the
    /// caller is told so by the error that follows). This deadline is for when no answer can come
    /// at all (the database unreachable, or a connection PostgreSQL dropped mid-answer): then
    /// `connection` is closed and not used again (the pool and the drain open another), and the
    /// caller is answered, saying the outcome is unknown, whether or not `body` ever returns, so
    /// nothing waiting behind it is held. A `body` that never returns is left behind (logged).
    func withDeadline<T: Sendable>(on connection: PostgresConnection, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let timeout = configuration.statementTimeout * 2 + .seconds(2)
        let answer = Ticket<T>()
        let logger = self.logger
        let work = Task {
            do {
                answer.fulfill(.success(try await body()))
            } catch {
                answer.fulfill(.failure(error))
            }
        }
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            logger.warning("a statement to PostgreSQL had no answer within \(timeout); its connection is closed")
            // Closing first: a pool must not lend the connection again before it is closed.
            connection.close().whenComplete { _ in }
            answer.fulfill(.failure(TandemError(.unavailable, "The server's database did not answer within \(timeout): it is down, restarting or unreachable. What was under way may or may not have taken effect: retry (a write sent again with the same id is applied once).")))
            work.cancel()
        }
        defer { watchdog.cancel() }
        // Cancelled (the server shutting down), the caller goes at once; the statement is left to
        // end by itself.
        return try await withTaskCancellationHandler {
            try await answer.value()
        } onCancel: {
            work.cancel()
            answer.fulfill(.failure(CancellationError()))
        }
    }

    /// Runs `body` on the drain's own connection, outside the pool: commits and catch-ups run one
    /// at a time (``GroupCommitQueue``), so one connection serves them, without a lease for each.
    /// Opened when there is none, within `connectTimeout` or `unavailable`; after any failure it is
    /// closed (a transaction it left open must not meet the next commit) and the next opens another.
    /// `body` runs under the statement deadline (``withDeadline(on:_:)``).
    func withDrainConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let connection: PostgresConnection
        if let open = drainConnection.withLock({ $0 }), !open.isClosed {
            connection = open
        } else {
            do {
                connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(connectTimeout: configuration.connectTimeout, statementTimeout: configuration.statementTimeout),
                                                                  id: drainConnections.add(1, ordering: .relaxed).newValue, logger: logger)
            } catch {
                // Where the database is is the server's to know: the caller is told it is unreachable.
                logger.warning("could not connect to PostgreSQL at \(url): \(Self.reason(error))")
                throw TandemError(.unavailable, "The server's database is unreachable. Nothing was done; retry.", cause: error)
            }
            drainConnection.withLock { $0 = connection }
        }
        do {
            return try await withDeadline(on: connection) { try await body(connection) }
        } catch {
            drainConnection.withLock { if $0 === connection { $0 = nil } }
            Task { try? await connection.close() }
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
        let timer = Task {
            try await Task.sleep(for: wait)
            guard state.abandon() else { return }
            lease.cancel()
            answer.fulfill(.failure(TandemError(.unavailable, "No connection to the server's database within \(wait): it is down or unreachable. Nothing was done; retry.")))
        }
        defer { timer.cancel() }
        // Cancelled (the server shutting down), the caller goes at once: a wait for a connection
        // must not hold a shutdown for `connectionWait`.
        return try await withTaskCancellationHandler {
            try await answer.value()
        } onCancel: {
            lease.cancel()
            answer.fulfill(.failure(CancellationError()))
        }
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
