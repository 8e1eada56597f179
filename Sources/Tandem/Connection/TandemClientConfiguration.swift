import Foundation
import Logging
import NIOSSL

/// How a ``TandemClient`` connects and stays connected.
public struct TandemClientConfiguration: Sendable {
    /// The id the client says hello with. When nil, one is made once and kept in
    /// `tandem-client-id` inside ``storageDirectory``, so it survives relaunches.
    public var clientID: String?
    /// Where the persistent client id is kept. Default ``LocalStorageLocation/defaultDirectory``.
    public var storageDirectory: URL = LocalStorageLocation.defaultDirectory
    /// A bearer token sent with hello, when the server checks access. A ``tokenProvider``, when
    /// given, is asked instead.
    public var token: String?
    /// Where the bearer token comes from, asked before each connection attempt: for tokens that
    /// expire, and for users who sign in and out. When the server says the token expired, the
    /// client reconnects and asks again; after a sign-in or sign-out, call
    /// ``TandemClient/refreshToken()``.
    public var tokenProvider: TokenProvider?
    /// How long a connection attempt may take to open its WebSocket: asking ``tokenProvider``,
    /// TCP, TLS and the upgrade. A server, or something on the way to it, that takes the
    /// connection and never answers (as a hung process does), or a token provider that never
    /// returns, is given up after this, and the client tries again after the backoff;
    /// requests waiting for the attempt then fail with `unavailable`, and engines keep their
    /// writes queued. Once open, a socket on which the server stays silent is closed after
    /// ``missedHeartbeatsAllowed`` heartbeat intervals. Default 10 s.
    public var connectTimeout: Duration = .seconds(10)
    /// How often a heartbeat is sent. Default 10 s.
    public var heartbeatInterval: Duration = .seconds(10)
    /// How many heartbeat intervals may pass without hearing from the server before the connection
    /// is taken as dead, closed and reconnected. Default 3.
    public var missedHeartbeatsAllowed = 3
    /// The backoff between connection attempts: 2, 4, 8, 16, 32, 60 s by default, with jitter.
    /// A connection that was up reconnects once at once before backing off.
    public var reconnectPolicy: RetryPolicy = .exponential(jitter: 0.2)
    /// The clock every delay runs on.
    public var clock: any Clock<Duration> = ContinuousClock()
    /// Where the reconnect delays' jitter comes from; give a seeded generator to replay them.
    public var random: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()
    /// How an `https://` or `wss://` server is checked: set its `trustRoots` to trust a private
    /// certificate authority (`.certificates(try NIOSSLCertificate.fromPEMFile(path))`). Nil uses
    /// the system's trust roots. Plain `http://` and `ws://` ignore it.
    public var tlsConfiguration: TLSConfiguration?
    /// The largest message accepted from the server. Default 256 MiB.
    public var maximumMessageBytes = 256 << 20
    /// Where the client logs, through swift-log: connecting and reconnecting, failed connections,
    /// and errors the server reports. Default label `tandem.client`.
    public var logger = Logger(label: "tandem.client")
    /// Where the client and the engines bound to it report reconnections, outbox depths and
    /// refused writes through swift-metrics (``ClientMetrics``); nil, the default, reports nothing.
    public var metrics: ClientMetrics?

    /// The defaults: no credentials, a client id kept in the default storage directory, a heartbeat
    /// every 10 s, reconnection with backoff, and no metrics. Set the properties to change them.
    public init() {}
}
