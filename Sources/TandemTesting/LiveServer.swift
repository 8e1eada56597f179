import Foundation
import Logging
import Synchronization
import TandemCore
import TandemServer

/// A real Tandem server on 127.0.0.1 and a free port, with its SQLite database in a temporary
/// directory: for tests and demos that need the real path, sockets included.
///
/// ```swift
/// let server = try await LiveServer.start()
/// let client = TandemClient(url: server.url)
/// // …
/// await server.stop()
/// ```
public final class LiveServer: Sendable {
    /// `http://127.0.0.1:PORT`.
    public let url: URL
    public let port: Int
    public let store: SQLiteServerStore
    /// The directory holding the database.
    public let directory: URL
    private let task: Task<Void, any Error>

    private init(url: URL, port: Int, store: SQLiteServerStore, directory: URL, task: Task<Void, any Error>) {
        self.url = url
        self.port = port
        self.store = store
        self.directory = directory
        self.task = task
    }

    /// Starts a server and returns once it accepts connections.
    public static func start(
        directory: URL? = nil, port: Int = 0,
        configuration: SyncServerConfiguration = SyncServerConfiguration(),
        storeConfiguration: SQLiteServerStoreConfiguration = SQLiteServerStoreConfiguration()
    ) async throws -> LiveServer {
        let directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("tandem-live-\(UUID().uuidString)")
        let store = try SQLiteServerStore(directory: directory, configuration: storeConfiguration)
        var configuration = configuration
        configuration.host = "127.0.0.1"
        configuration.port = port
        // Stopping cancels open connections, which the server logs as errors: keep a test's output quiet.
        configuration.logger.logLevel = .critical
        let ready = ReadyPort()
        let server = SyncServer(store: store, configuration: configuration) { _, port in ready.fulfill(port) }
        let task = Task { try await server.run() }
        let bound = try await ready.wait(orFailureOf: task)
        return LiveServer(url: URL(string: "http://127.0.0.1:\(bound)")!, port: bound, store: store, directory: directory, task: task)
    }

    /// Stops the server (its connections close); the database stays in `directory`.
    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}

/// The bound port, handed from the server's start callback to whoever waits for it.
final class ReadyPort: Sendable {
    private enum State {
        case waiting(CheckedContinuation<Int, any Error>?)
        case ready(Int)
        case failed(any Error)
    }

    private let state = Mutex(State.waiting(nil))

    func fulfill(_ port: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, any Error>? in
            guard case .waiting(let waiter) = state else { return nil }
            state = .ready(port)
            return waiter
        }
        waiter?.resume(returning: port)
    }

    func fail(_ error: any Error) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, any Error>? in
            guard case .waiting(let waiter) = state else { return nil }
            state = .failed(error)
            return waiter
        }
        waiter?.resume(throwing: error)
    }

    func wait(orFailureOf task: Task<Void, any Error>) async throws -> Int {
        let watcher = Task {
            do {
                try await task.value
                self.fail(TandemError(.unavailable, "The server stopped before it was ready."))
            } catch {
                self.fail(error)
            }
        }
        defer { watcher.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let now = state.withLock { state -> Result<Int, any Error>? in
                switch state {
                case .ready(let port): return .success(port)
                case .failed(let error): return .failure(error)
                case .waiting: state = .waiting(continuation); return nil
                }
            }
            if let now { continuation.resume(with: now) }
        }
    }
}
