import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
import TandemCore

/// The Tandem sync server: the WebSocket stream at `/v1/stream`, the HTTP API under `/v1`, and
/// `/health` and `/metrics`, over one ``ServerStore``.
///
/// It is a `Service`: run it in a `ServiceGroup` (which also handles SIGINT and SIGTERM), or call
/// `run()` directly. The store runs as part of it.
///
/// ```swift
/// let store = try SQLiteServerStore(directory: URL(filePath: ".tandem"))
/// let server = SyncServer(store: store) { host, port in print("listening on http://\(host):\(port)") }
/// let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigint, .sigterm], logger: logger)
/// try await group.run()
/// ```
public struct SyncServer: Service {
    /// Where the data is kept; the server runs it as part of itself.
    public let store: any ServerStore
    /// The address, limits, access control, TLS and the rest, as given at creation.
    public let configuration: SyncServerConfiguration
    /// What this server counts, which `GET /metrics` writes (``ServerMetrics``).
    public let metrics = ServerMetrics()
    private let onListening: @Sendable (_ host: String, _ port: Int) async -> Void

    /// - Parameters:
    ///   - store: where the data is kept; the server runs it as part of itself.
    ///   - configuration: the address, limits, access control, TLS and the rest.
    ///   - onListening: called once the server accepts connections, with the bound port (useful
    ///     with port 0).
    public init(store: any ServerStore, configuration: SyncServerConfiguration = SyncServerConfiguration(),
                onListening: @escaping @Sendable (_ host: String, _ port: Int) async -> Void = { _, _ in }) {
        self.store = store
        self.configuration = configuration
        self.onListening = onListening
    }

    public func run() async throws {
        let configuration = self.configuration
        let store = self.store
        let clock = ServerClock(configuration.clock)
        let metrics = self.metrics
        let hub = FanOutHub(store: store, pacing: configuration.fanOutPacing, clock: clock, logger: configuration.logger, metrics: metrics,
                            onListenerCountChange: configuration.onListenerCountChange)
        // Weakly: the store outlives the hub (a restart runs another on it), and the hub holds the
        // store; held strongly, neither would ever be freed, nor the database closed.
        store.observeCommits { [weak hub] in hub?.receive($0) }
        store.observeGroupCommits { metrics.grouped($0) }
        let service = SyncService(store: store, hub: hub, limits: configuration.limits, access: configuration.access, metrics: metrics, now: clock.now)
        // HEAD is answered like GET without the body.
        let router = Router(context: CallerRequestContext.self, options: .autoGenerateHeadEndpoints)
        let sites = SitePolicy(bindHost: configuration.host, open: configuration.access == nil, allowedOrigins: configuration.allowedOrigins,
                               allowedHosts: configuration.allowedHosts)
        if !sites.allowedOrigins.isEmpty {
            router.add(middleware: AllowedOriginsMiddleware(sites: sites))
        }
        router.add(middleware: JSONErrorMiddleware(metrics: metrics))
        if configuration.console {
            router.add(middleware: ConsoleMiddleware(console: .bundled, metrics: metrics))
        }
        HTTPAPI(service: service).register(on: router)
        let sessions = Atomic<Int>(0)
        let watchdog = SessionWatchdog(interval: configuration.heartbeatInterval, clock: clock, logger: configuration.logger)
        // The stream's upgrade is decided here rather than by a `router.ws` route: that route keeps
        // each connection's request context in a box the context itself holds, a cycle nothing
        // breaks, so every WebSocket connection leaked its context.
        let stream = { @Sendable (channel: any Channel) -> WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context> in
            { inbound, outbound, _ in
                let id = sessions.add(1, ordering: .relaxed).newValue
                let session = StreamSession(id: id, service: service, configuration: configuration, clock: clock, watchdog: watchdog,
                                            address: channel.remoteAddress?.ipAddress)
                service.streamSessions.add(1, ordering: .relaxed)
                await Self.serve(session, channel: channel, inbound: inbound, configuration: configuration, clock: clock, watchdog: watchdog)
                service.streamSessions.subtract(1, ordering: .relaxed)
            }
        }
        let host = configuration.host
        let port = configuration.port
        let onListening = self.onListening
        // A frame may be as large as a request: one frame holding a whole batch is what most
        // WebSocket libraries send. A larger frame closes the connection with 1009.
        let maximumFrame = Self.maximumIncomingFrameBytes(configuration.limits)
        let timeouts = HTTPConnectionGuardStateMachine.Timeouts(idle: configuration.idleTimeout, head: configuration.requestHeadTimeout, body: configuration.requestBodyTimeout)
        let webSocket = HTTP1WebSocketUpgradeChannel.Configuration(ws: .init(maxFrameSize: maximumFrame, autoPing: .disabled, closeTimeout: .seconds(5)))
        let capacity = ConnectionCapacity(maximum: configuration.maximumConnections)
        let plain = HTTPServerBuilder { responder in
            GuardedHTTPChannel(
                inner: HTTP1WebSocketUpgradeChannel(responder: responder, configuration: webSocket) { head, channel, _ in
                    head.path.map(HTTPConnectionGuard.isStreamPath) == true ? .upgrade([:], stream(channel)) : .dontUpgrade
                },
                timeouts: timeouts, maximumBodyBytes: configuration.limits.maximumRequestBytes,
                sites: sites, clock: clock, capacity: capacity)
        }
        // With TLS, the handshake comes first on each connection; everything above it is the same.
        let server = try configuration.tls.map { try HTTPServerBuilder.tls(plain, tlsConfiguration: $0) } ?? plain
        let app = Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(host, port: port), serverName: "tandem/\(TandemVersion.current)",
                                 availableConnectionsDelegate: .maximum(configuration.maximumConnections + ConnectionCapacity.reserve,
                                                                                       logger: configuration.logger)),
            // A key set fetched from a URL keeps itself fresh as a service of the server's.
            services: [store, hub, watchdog] + (configuration.access?.tokens?.keys.flatMap { $0.url == nil ? nil : [$0] } ?? []),
            onServerRunning: { channel in
                await onListening(host, channel.localAddress?.port ?? port)
            },
            logger: configuration.logger
        )
        try await app.run()
    }

    /// Runs one WebSocket session: a reader handling messages and the session's ordered write
    /// queue, with its outbox written onto `channel` by a ``SessionChannelWriter``, watched by the
    /// server's ``SessionWatchdog``. The session ends when the client goes, when it is silent for
    /// three heartbeats, or when it reads too slowly (its outbox overflows, even while the socket
    /// is full): then every task is cancelled and the socket closed.
    static func serve(_ session: StreamSession, channel: any Channel, inbound: WebSocketInboundStream,
                      configuration: SyncServerConfiguration, clock: ServerClock, watchdog: SessionWatchdog) async {
        let lastHeard = LastHeard(clock.now())
        // Whichever part sees the end first says so.
        let end = Ticket<Void>()
        session.outbox.onOverflow = { end.fulfill(.success(())) }
        SessionChannelWriter(channel: channel, outbox: session.outbox, frameBytes: outgoingFrameBytes) {
            end.fulfill(.success(()))
        }.start()
        watchdog.watch(session.id, lastHeard: lastHeard) { end.fulfill(.success(())) }
        defer { watchdog.forget(session.id) }
        await withDiscardingTaskGroup { group in
            group.addTask {
                await session.runWrites()
            }
            group.addTask {
                await withDiscardingTaskGroup { requests in
                    do {
                        var reader = MessageReader(limit: configuration.limits.maximumRequestBytes)
                        for try await frame in inbound {
                            lastHeard.touch(clock.now())
                            switch reader.read(frame) {
                            case .incomplete:
                                break
                            case .text(let buffer):
                                buffer.withUnsafeReadableBytes { session.handle($0, tasks: &requests) }
                            case .refused(let error, let id):
                                // Answered by its id when its first bytes name one: the request is
                                // refused for good (it would be whenever sent), and the client
                                // knows which.
                                session.outbox.send(.error(id: id, error))
                            }
                        }
                    } catch {
                        configuration.logger.debug("stream session \(session.id) ended: \(error)")
                    }
                    end.fulfill(.success(()))
                    requests.cancelAll()
                }
            }
            _ = try? await end.value()
            if session.outbox.isOverflowed {
                configuration.logger.notice("stream session \(session.id) read too slowly and was disconnected; it can resume from its last version")
            }
            session.close()
            group.cancelAll()
        }
    }
}

/// When a connection last sent anything, as a point on the server's clock.
final class LastHeard: Sendable {
    private let milliseconds: Atomic<Int64>
    init(_ now: Duration) { milliseconds = Atomic(now.milliseconds) }
    var instant: Duration { .milliseconds(milliseconds.load(ordering: .relaxed)) }
    func touch(_ now: Duration) { milliseconds.store(now.milliseconds, ordering: .relaxed) }
}

extension SyncServer {
    /// The largest frame the server sends: a longer message goes out in frames of this size, which
    /// every client takes (the server takes frames as large as a request).
    static let outgoingFrameBytes = 1 << 20

    /// The largest frame the server takes: a request, with room for its envelope.
    static func maximumIncomingFrameBytes(_ limits: ServerLimits) -> Int {
        limits.maximumRequestBytes + 1024
    }
}

extension Duration {
    /// The whole milliseconds of a duration.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
