import Foundation
import Synchronization
import Logging
import Tandem
import TandemCore
import TandemServer

/// A real Tandem server on 127.0.0.1 and a free port: for tests and demos that need the real path,
/// sockets included. By default its store is SQLite in a temporary directory; any store can be
/// given instead.
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
    /// The port the server is bound to, on 127.0.0.1.
    public let port: Int
    /// The store the server runs on; it keeps its data after `stop()`.
    public let store: any ServerStore
    /// What the server counts, which `GET /metrics` writes.
    public let metrics: ServerMetrics
    /// The directory holding the SQLite database, for a server started on one.
    public let directory: URL
    private let task: Task<Void, any Error>
    /// The server's listener count as it reports it, and those awaiting a count.
    private let listeners: WatchedValue<Int>

    private init(url: URL, port: Int, store: any ServerStore, metrics: ServerMetrics, directory: URL, task: Task<Void, any Error>, listeners: WatchedValue<Int>) {
        self.listeners = listeners
        self.metrics = metrics
        self.url = url
        self.port = port
        self.store = store
        self.directory = directory
        self.task = task
    }

    /// Starts a server on SQLite in `directory` (a new temporary one by default) and returns once
    /// it accepts connections.
    public static func start(
        directory: URL? = nil, port: Int = 0,
        configuration: SyncServerConfiguration = SyncServerConfiguration(),
        storeConfiguration: SQLiteServerStoreConfiguration = SQLiteServerStoreConfiguration()
    ) async throws -> LiveServer {
        let directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("tandem-live-\(UUID().uuidString)")
        let store = try SQLiteServerStore(directory: directory, configuration: storeConfiguration)
        return try await start(store: store, port: port, configuration: configuration, directory: directory)
    }

    /// Starts a server on `store` and returns once it accepts connections. Starting another on the
    /// same store and port after ``stop()`` is a restart.
    public static func start(store: any ServerStore, port: Int = 0, configuration: SyncServerConfiguration = SyncServerConfiguration()) async throws -> LiveServer {
        try await start(store: store, port: port, configuration: configuration, directory: FileManager.default.temporaryDirectory)
    }

    private static func start(store: any ServerStore, port: Int, configuration: SyncServerConfiguration, directory: URL) async throws -> LiveServer {
        var configuration = configuration
        configuration.host = "127.0.0.1"
        configuration.port = port
        // Stopping cancels open connections, which the server logs as errors: keep a test's output quiet.
        configuration.logger.logLevel = .critical
        let listeners = WatchedValue(0)
        let reportListeners = configuration.onListenerCountChange
        configuration.onListenerCountChange = { count in
            listeners.update { $0 = count }
            reportListeners?(count)
        }
        let ready = Ticket<Int>()
        let server = SyncServer(store: store, configuration: configuration) { _, port in ready.fulfill(.success(port)) }
        let task = Task {
            do {
                try await server.run()
                ready.fulfill(.failure(TandemError(.unavailable, "The server stopped before it was ready.")))
            } catch {
                ready.fulfill(.failure(error))
                throw error
            }
        }
        let bound = try await ready.value()
        let scheme = configuration.tls == nil ? "http" : "https"
        return LiveServer(url: URL(string: "\(scheme)://127.0.0.1:\(bound)")!, port: bound, store: store, metrics: server.metrics, directory: directory, task: task, listeners: listeners)
    }

    /// A server whose handle is dropped without ``stop()`` stops too: its port, its connections
    /// and the store it opened are not kept for the rest of the process.
    deinit {
        task.cancel()
    }

    /// How many listeners the server runs now, over every connection.
    public var listenerCount: Int { listeners.value }

    /// Returns once the server runs exactly `count` listeners: the event to await after starting
    /// or dropping one, instead of polling. A cancelled task (a test's time limit) returns at once.
    ///
    /// ```swift
    /// engine = nil                              // its listener leaves the server
    /// await server.waitForListeners(count: 0)
    /// ```
    public func waitForListeners(count: Int) async {
        await listeners.wait { $0 == count }
    }

    /// Stops the server (its connections close); the store keeps its data.
    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}

