import Hummingbird
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
    public let store: any ServerStore
    public let configuration: SyncServerConfiguration
    private let onListening: @Sendable (_ host: String, _ port: Int) async -> Void

    /// - Parameter onListening: called once the server accepts connections, with the bound port
    ///   (useful with port 0).
    public init(store: any ServerStore, configuration: SyncServerConfiguration = SyncServerConfiguration(),
                onListening: @escaping @Sendable (_ host: String, _ port: Int) async -> Void = { _, _ in }) {
        self.store = store
        self.configuration = configuration
        self.onListening = onListening
    }

    public func run() async throws {
        let hub = FanOutHub(store: store)
        store.observeCommits { hub.publish($0) }
        let router = Router(context: BasicWebSocketRequestContext.self)
        HTTPAPI(store: store, limits: configuration.limits, hub: hub).register(on: router)
        let sessions = Atomic<Int>(0)
        let configuration = self.configuration
        let store = self.store
        router.ws("/v1/stream") { inbound, outbound, _ in
            let id = sessions.add(1, ordering: .relaxed).newValue
            let session = StreamSession(id: id, hub: hub, store: store, configuration: configuration)
            await Self.serve(session, inbound: inbound, outbound: outbound, configuration: configuration)
        }
        let host = configuration.host
        let port = configuration.port
        let onListening = self.onListening
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(webSocketRouter: router, configuration: .init(ws: .init(maxFrameSize: 1 << 20, autoPing: .disabled, closeTimeout: .seconds(5)))),
            configuration: .init(address: .hostname(host, port: port), serverName: "tandem/\(TandemVersion.current)"),
            services: [store],
            onServerRunning: { channel in
                await onListening(host, channel.localAddress?.port ?? port)
            },
            logger: configuration.logger
        )
        try await app.run()
    }

    /// Runs one WebSocket session: a reader handling messages, a writer draining the outbox, the
    /// session's ordered write queue, and a watchdog. The session ends when the client goes, when it
    /// is silent for three heartbeats, or when it reads too slowly (its outbox overflows, even while
    /// the writer is stuck on a full socket): then every task is cancelled and the socket closed.
    static func serve(_ session: StreamSession, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, configuration: SyncServerConfiguration) async {
        let lastHeard = LastHeard()
        // Whichever part sees the end first says so.
        let end = Ticket<Void>()
        session.outbox.onOverflow = { end.fulfill(.success(())) }
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await text in session.outbox.frames {
                    do {
                        try await outbound.writeTextMessage(text)
                    } catch {
                        break
                    }
                    session.outbox.wrote(text)
                }
                end.fulfill(.success(()))
            }
            group.addTask {
                await session.runWrites()
            }
            group.addTask {
                let allowed = configuration.heartbeatInterval * 3
                while !Task.isCancelled {
                    do {
                        try await Task.sleep(for: configuration.heartbeatInterval)
                    } catch {
                        return
                    }
                    if ContinuousClock.now - lastHeard.instant > allowed {
                        configuration.logger.debug("stream session \(session.id): no message for \(allowed); closing")
                        end.fulfill(.success(()))
                        return
                    }
                }
            }
            group.addTask {
                await withDiscardingTaskGroup { requests in
                    do {
                        for try await message in inbound.messages(maxSize: configuration.limits.maximumRequestBytes) {
                            lastHeard.touch()
                            switch message {
                            case .text(let text):
                                session.handle(text, tasks: &requests)
                            case .binary:
                                session.outbox.send(.error(id: nil, TandemError.invalidArgument("Send messages as JSON text frames, not binary.")))
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

/// When a connection last sent anything.
final class LastHeard: Sendable {
    private let value = Mutex(ContinuousClock.now)
    var instant: ContinuousClock.Instant { value.withLock { $0 } }
    func touch() { value.withLock { $0 = .now } }
}
