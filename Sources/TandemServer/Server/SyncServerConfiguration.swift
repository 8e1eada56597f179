import Logging
import NIOSSL
import TandemCore

/// How a ``SyncServer`` listens and what it allows.
///
/// Start from the defaults and change what differs:
///
/// ```swift
/// var configuration = SyncServerConfiguration()
/// configuration.port = 0   // a free port, given to onListening
/// configuration.access = AccessControl(tokens: try await BearerTokens(secret: secret))
/// configuration.fanOutPacing = FanOutPacing(interval: .milliseconds(10), busyCommits: 32)
/// let server = SyncServer(store: store, configuration: configuration) { _, port in print("port \(port)") }
/// ```
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
    /// How long an HTTP connection may sit with no request under way (new, or between keep-alive
    /// requests) before it is closed. Default 60 s.
    public var idleTimeout: Duration = .seconds(60)
    /// How long a request's head (request line and headers) may take to arrive once it has begun;
    /// past it the request is answered 408 and the connection closed. Default 10 s.
    public var requestHeadTimeout: Duration = .seconds(10)
    /// How long a request's body may take to arrive after its head; past it, 408 and closed.
    /// Default 30 s.
    public var requestBodyTimeout: Duration = .seconds(30)
    /// The most connections (HTTP and WebSocket together) served at once. A few more are accepted
    /// for health probes: on those `/health` and `/metrics` are answered, anything else `503` with
    /// `Retry-After`; past them connections wait to be accepted until one closes. Default 10,000.
    public var maximumConnections = 10_000
    /// How listeners' deliveries are paced under sustained write load; nil delivers every commit
    /// as soon as it is visible, whatever the load. Default ``FanOutPacing/init(interval:busyCommits:)``.
    public var fanOutPacing: FanOutPacing? = FanOutPacing()
    /// The clock the timeouts, the heartbeat watchdog, the write rate and the fan-out's pacing run
    /// on; tests pass a manual one.
    public var clock: any Clock<Duration> = ContinuousClock()
    /// Bearer tokens and who may do what; nil runs the server open (anyone reaching the port reads
    /// and writes everything).
    public var access: AccessControl?
    /// Serve HTTPS and WSS with this certificate and key instead of plain HTTP and WebSocket; see
    /// ``tls(certificateFile:keyFile:)``. Nil (the default) serves plain text: put a TLS proxy in
    /// front, or set this, before the server faces a network.
    public var tls: TLSConfiguration?
    /// The origins (`https://app.example`, with a port when it is not the scheme's) whose web pages
    /// may write to the server and open streams, besides the server's own (its console); `"*"`
    /// allows every page. A request with no `Origin` (a native client) is not affected. Default
    /// none: a page on another origin can neither write nor open a stream.
    public var allowedOrigins: [String] = []
    /// Host names a server bound to a loopback address answers besides `localhost`, `127.0.0.1`,
    /// `[::1]` and the allowed origins' hosts: the name a proxy in front of it keeps in the `Host`
    /// header. Requests addressed to any other name are refused (a guard against DNS rebinding).
    /// An open server (no ``access``) bound to another address checks names too, and answers its
    /// IP addresses, loopback names and these; a secured one answers any. Default none.
    public var allowedHosts: [String] = []
    /// The server's logger.
    public var logger = Logger(label: "tandem.server")
    /// Whether the web console is served at `/console` (``ConsoleFiles``). It is a client like any
    /// other: it reads and writes through the HTTP API and the stream, as the caller's token allows.
    public var console = true
    /// Called with the number of live listeners each time a listener comes or goes, in the order of
    /// the changes: for metrics, and for tests that await a listener's arrival or departure. It is
    /// called while the server holds its listener table: keep it short and never call the server.
    public var onListenerCountChange: (@Sendable (Int) -> Void)?

    /// The defaults each property states: an open server on 127.0.0.1:8080, plain HTTP, with the
    /// console.
    public init() {}

    /// Whether `host` names a loopback address (`localhost`, `127.x.x.x`, `::1`), reachable from
    /// this machine alone.
    public static func isLoopback(_ host: String) -> Bool {
        SitePolicy.isLoopbackName(host.lowercased())
    }

    /// A TLS configuration from PEM files: the certificate chain (the server's certificate first)
    /// and its private key. Throws `invalid-argument` naming the file and what is wrong with it.
    public static func tls(certificateFile: String, keyFile: String) throws(TandemError) -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        } catch {
            throw TandemError.invalidArgument("Cannot read a PEM certificate chain from \(certificateFile): \(error). Give the server's certificate (then its intermediates) in PEM.")
        }
        guard !chain.isEmpty else {
            throw TandemError.invalidArgument("\(certificateFile) holds no PEM certificate. Give the server's certificate (then its intermediates) in PEM.")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        } catch {
            throw TandemError.invalidArgument("Cannot read a PEM private key from \(keyFile): \(error). Give the certificate's unencrypted private key in PEM.")
        }
        return TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
    }
}

/// Pacing of the fan-out under sustained write load. Below `busyCommits` commits within one
/// `interval`, each commit goes to its listeners as soon as it is visible. At or above it, the
/// server delivers at most once per `interval`: every listener still gets every commit, whole and
/// in order, but a connection gets one message for all the commits of an interval instead of one
/// per commit. Each message is a socket write and a wake-up of the reader, so with many listeners
/// this is what keeps the writers' rate; the price is up to `interval` of extra latency while the
/// load lasts.
public struct FanOutPacing: Sendable, Hashable {
    /// The shortest time between two deliveries under load. Default 5 ms.
    public var interval: Duration
    /// The commits within one interval that count as sustained load. Default 16 (3,200 commits/s
    /// at 5 ms).
    public var busyCommits: Int

    /// Pacing that delivers at most once per `interval` once `busyCommits` or more commits come
    /// within one interval.
    public init(interval: Duration = .milliseconds(5), busyCommits: Int = 16) {
        self.interval = interval
        self.busyCommits = busyCommits
    }
}
