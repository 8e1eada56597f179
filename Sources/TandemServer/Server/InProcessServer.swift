import ServiceLifecycle
import Synchronization
import TandemCore

/// A Tandem server reached without a socket: the same sessions, write ordering, fan-out and store
/// as ``SyncServer``'s WebSocket stream, with the messages handed over in process. For tests and
/// previews that want the server's real semantics (versions per commit, exactly-once by
/// `MutationID`, listeners resumed from a version) without a port.
///
/// ```swift
/// let server = InProcessServer(store: MemoryServerStore())
/// let connection = server.connect()
/// connection.send(#"{"type": "hello", "clientId": "c1", "protocol": 3}"#)
/// for await text in connection.messages { print(text) }   // welcome, then the answers
/// ```
///
/// The fan-out runs in a task the server starts when made, and stops when ``stop()`` is called or
/// the server is released.
public final class InProcessServer: Sendable {
    let service: SyncService
    private let configuration: SyncServerConfiguration
    private let clock: ServerClock
    private let sessions = Atomic<Int>(0)
    private let hubTask: Mutex<Task<Void, Never>?>

    /// The store the server decides writes in and reads from.
    public let store: any ServerStore

    /// A server over `store`, with its store's work and its fan-out already running.
    ///
    /// - Parameters:
    ///   - store: where the data is kept; the server runs its work (pruning, its writer) as a
    ///     `SyncServer` does.
    ///   - configuration: the limits, access control, clock, fan-out pacing and logger, used as a
    ///     `SyncServer` uses them. What belongs to sockets and HTTP (the address, the timeouts,
    ///     `maximumConnections`, TLS, the console) does nothing here.
    public init(store: any ServerStore, configuration: SyncServerConfiguration = SyncServerConfiguration()) {
        self.store = store
        self.configuration = configuration
        clock = ServerClock(configuration.clock)
        let hub = FanOutHub(store: store, pacing: configuration.fanOutPacing, clock: clock, logger: configuration.logger,
                            onListenerCountChange: configuration.onListenerCountChange)
        // Weakly: the store outlives the hub (a restart runs another on it), and the hub holds the
        // store; held strongly, neither would ever be freed, nor the database closed.
        store.observeCommits { [weak hub] in hub?.receive($0) }
        service = SyncService(store: store, hub: hub, limits: configuration.limits, access: configuration.access, now: clock.now)
        // The store's own work (pruning, its writer) and the fan-out, as a `SyncServer` runs them.
        hubTask = Mutex(Task {
            await withDiscardingTaskGroup { group in
                for service in [store as any Service, hub] {
                    group.addTask {
                        do {
                            try await service.run()
                        } catch {
                            configuration.logger.error("the in-process server's \(type(of: service)) stopped: \(error)")
                        }
                    }
                }
            }
        })
    }

    deinit {
        stop()
    }

    /// How many listeners run now, over every connection.
    public var listenerCount: Int { service.hub.listenerCount }

    /// Stops the store's work and the fan-out; open connections get nothing more from listeners.
    public func stop() {
        hubTask.withLock { task in
            task?.cancel()
            task = nil
        }
    }

    /// Opens one connection: a session as a WebSocket would have, which says nothing until the
    /// client says `hello`.
    public func connect() -> InProcessConnection {
        let session = StreamSession(id: sessions.add(1, ordering: .relaxed).newValue, service: service, configuration: configuration, clock: clock)
        return InProcessConnection(session: session)
    }
}

/// One connection to an ``InProcessServer``: text messages in each direction, in order.
public final class InProcessConnection: Sendable {
    /// The server's messages, in order; it ends when the connection closes.
    public let messages: AsyncStream<String>
    private let inbound: AsyncStream<String>.Continuation
    private let task: Task<Void, Never>

    init(session: StreamSession) {
        let (messages, deliver) = AsyncStream.makeStream(of: String.self)
        let (requests, inbound) = AsyncStream.makeStream(of: String.self)
        self.messages = messages
        self.inbound = inbound
        task = Task {
            await withDiscardingTaskGroup { group in
                group.addTask { await session.runWrites() }
                group.addTask {
                    // The session's outbox, written out as a socket writer would.
                    while let (text, bytes) = await session.outbox.next() {
                        deliver.yield(text)
                        session.outbox.wrote(bytes)
                    }
                    deliver.finish()
                }
                await withDiscardingTaskGroup { tasks in
                    for await request in requests {
                        let bytes = Array(request.utf8)
                        bytes.withUnsafeBytes { session.handle($0, tasks: &tasks) }
                    }
                    tasks.cancelAll()
                }
                session.close()
                group.cancelAll()
            }
            deliver.finish()
        }
        // Nobody reads the server any more: the connection is closed.
        deliver.onTermination = { _ in inbound.finish() }
    }

    deinit {
        close()
    }

    /// Sends one message to the server.
    public func send(_ text: String) {
        inbound.yield(text)
    }

    /// Closes the connection, as a client closing its socket: the session ends and its listeners go.
    public func close() {
        inbound.finish()
    }
}
