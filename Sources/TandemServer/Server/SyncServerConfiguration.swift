import Logging

/// How a ``SyncServer`` listens and what it allows.
public struct SyncServerConfiguration: Sendable {
    /// The address to bind. Default 127.0.0.1.
    public var host = "127.0.0.1"
    /// The port; 0 picks a free one (read it from `onListening`). Default 8080.
    public var port = 8080
    /// Every limit the server enforces, on HTTP and on the WebSocket stream alike.
    public var limits = ServerLimits()
    /// How often clients should send heartbeats; a connection silent for three intervals is closed.
    /// Default 10 s.
    public var heartbeatInterval: Duration = .seconds(10)
    /// How many bytes may wait to be written to one connection before it is closed as a slow
    /// consumer. Default 64 MiB.
    public var maximumQueuedBytesPerConnection = 64 << 20
    /// The clock the heartbeat watchdog and the write rate run on; tests pass a manual one.
    public var clock: any Clock<Duration> = ContinuousClock()
    /// The server's logger.
    public var logger = Logger(label: "tandem.server")

    public init() {}
}
