import ArgumentParser
import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import TandemCore
import TandemPostgres
import TandemServer

/// `tandem serve`: the sync server on the embedded SQLite store, or on PostgreSQL (`--postgres`).
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the sync server (WebSocket /v1/stream and the HTTP API) on an embedded SQLite database, or on PostgreSQL shared by several nodes."
    )

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on (0 picks a free one).")
    var port = 8080

    @Option(name: .customLong("data-dir"), help: "The directory holding the database (created if missing).")
    var dataDirectory = "./.tandem"

    @Option(help: "Keep the data in this PostgreSQL database instead of --data-dir, e.g. postgres://user:password@127.0.0.1:5432/tandem?sslmode=disable (default: $TANDEM_POSTGRES_URL). Several nodes may share one.")
    var postgres: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "warning"

    @Option(name: .customLong("auth-secret"), help: "Require HS256 bearer tokens signed with this secret, at least 32 bytes (default: $TANDEM_AUTH_SECRET). Without one the server runs open.")
    var authSecret: String?

    @Option(help: "A rules file (YAML or JSON) saying who may read and write which documents; `tandem rules check FILE` checks one. With --auth-secret and no rules file, each user reaches users/{uid} and below.")
    var rules: String?

    @Option(name: .customLong("tls-cert"), help: "Serve HTTPS and WSS with this PEM certificate chain (the server's certificate first); needs --tls-key.")
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: "The PEM private key of --tls-cert.")
    var tlsKey: String?

    @Option(name: .customLong("jwks-file"), help: "Verify RS256 and ES256 tokens with the public keys of this JSON Web Key Set file (an identity provider's).")
    var jwksFile: String?

    @Option(name: .customLong("jwks-url"), help: "Verify RS256 and ES256 tokens with the JSON Web Key Set at this URL (Sign in with Apple, Firebase Auth, Auth0, Supabase Auth, Keycloak publish one), fetched again on its cache headers and when a token names a key it does not hold.")
    var jwksURL: String?

    @Option(name: .customLong("token-issuer"), help: "The iss claim every token must carry (the identity provider's).")
    var tokenIssuer: String?

    @Option(name: .customLong("token-audience"), help: "The aud claim every token must carry or list (your app's client id, or this API's identifier).")
    var tokenAudience: String?

    @Option(name: .customLong("token-clock-skew"), help: "Seconds the token issuer's clock and this server's may disagree by, for exp and nbf (default 60 with a key set, 0 for --auth-secret alone).")
    var tokenClockSkew: Int?

    @Option(name: .customLong("allow-origin"), help: "A web origin (https://app.example) whose pages may write to this server and open streams, besides the server's own console; repeat for several, or * for every page. Requests without an Origin header (native clients) are not affected.")
    var allowOrigins: [String] = []

    @Option(name: .customLong("allow-host"), help: "A host name a server bound to a loopback address answers besides localhost, 127.0.0.1 and [::1] (the name a proxy in front of it keeps in the Host header); repeat for several.")
    var allowHosts: [String] = []

    @Option(name: .customLong("statement-timeout"), help: "With --postgres: seconds any statement may wait for PostgreSQL's answer before its connection is closed and what it did fails with unavailable (a database restarting, a network dropping packets).")
    var statementTimeout: Double = 30

    @Option(name: .customLong("node-timeout"), help: "With --postgres: seconds a node may go unheard (it says it is there every second) before the other nodes stop keeping the commit log for it; a node cut off longer has its listeners load again when it is back.")
    var nodeTimeout: Double = 60

    @Option(name: .customLong("shutdown-grace"), help: "Seconds SIGTERM or SIGINT lets requests and commits under way finish; a server still running three times this long after the signal exits anyway, with status 1.")
    var shutdownGrace: Double = 10

    @Option(name: .customLong("max-connections"), help: "The most connections (HTTP and WebSocket together) served at once; more wait to be accepted. /health and /metrics are still answered at the cap.")
    var maximumConnections = 10_000

    @Option(name: .customLong("max-connections-per-address"), help: "The most anonymous WebSocket connections one address (an IPv6 /64) may hold at once.")
    var maximumConnectionsPerAddress = 1_000

    @Option(name: .customLong("max-connections-per-user"), help: "The most WebSocket connections one signed-in user may hold at once.")
    var maximumConnectionsPerUser = 100

    func run() async throws {
        for (name, value) in [("--statement-timeout", statementTimeout), ("--shutdown-grace", shutdownGrace), ("--node-timeout", nodeTimeout)] where !(value > 0 && value <= 86_400) {
            Console.error("error: invalid-argument: \(name) takes a number of seconds above 0 and at most 86400, not \(value).")
            throw ExitCode(2)
        }
        for (name, value) in [("--max-connections", maximumConnections), ("--max-connections-per-address", maximumConnectionsPerAddress),
                              ("--max-connections-per-user", maximumConnectionsPerUser)] where value < 1 {
            Console.error("error: invalid-argument: \(name) takes a count of at least 1, not \(value).")
            throw ExitCode(2)
        }
        var logger = Logger(label: "tandem.server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .warning
        let store: any ServerStore
        let postgresURL = postgres ?? ProcessInfo.processInfo.environment["TANDEM_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }
        do {
            if let postgresURL {
                var storeConfiguration = PostgresServerStoreConfiguration()
                storeConfiguration.logger = logger
                storeConfiguration.statementTimeout = .milliseconds(Int64(statementTimeout * 1000))
                storeConfiguration.nodeTimeout = .milliseconds(Int64(nodeTimeout * 1000))
                store = try await PostgresServerStore.open(url: try PostgresURL(postgresURL), configuration: storeConfiguration)
            } else {
                store = try SQLiteServerStore(directory: URL(fileURLWithPath: dataDirectory))
            }
        } catch let error as TandemError {
            Console.error("error: \(error.code.rawValue): \(error.message)")
            throw ExitCode(2)
        } catch {
            Console.error("error: \(error)")
            throw ExitCode(2)
        }
        var configuration = SyncServerConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.logger = logger
        configuration.allowedOrigins = allowOrigins
        configuration.allowedHosts = allowHosts
        configuration.maximumConnections = maximumConnections
        configuration.limits.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        configuration.limits.maximumConnectionsPerUser = maximumConnectionsPerUser
        for origin in allowOrigins where origin != "*" {
            guard let url = URL(string: origin), let scheme = url.scheme, ["http", "https"].contains(scheme.lowercased()), url.host != nil,
                  url.path.isEmpty || url.path == "/", url.query == nil else {
                Console.error("error: invalid-argument: --allow-origin takes an origin such as https://app.example or http://localhost:3000 (a scheme, a host and an optional port), not '\(origin)'.")
                throw ExitCode(2)
            }
        }
        switch (tlsCertificate, tlsKey) {
        case (let certificate?, let key?):
            do {
                configuration.tls = try SyncServerConfiguration.tls(certificateFile: certificate, keyFile: key)
            } catch {
                Console.error("error: \(error.code.rawValue): \(error.message)")
                throw ExitCode(2)
            }
        case (nil, nil):
            break
        default:
            Console.error("error: invalid-argument: --tls-cert and --tls-key go together: give both, or neither to serve plain HTTP.")
            throw ExitCode(2)
        }
        let scheme = configuration.tls == nil ? "http" : "https"
        let secret = authSecret ?? ProcessInfo.processInfo.environment["TANDEM_AUTH_SECRET"].flatMap({ $0.isEmpty ? nil : $0 })
        do {
            var keys: TokenKeySet?
            switch (jwksFile, jwksURL) {
            case (let file?, nil):
                keys = try await TokenKeySet(contentsOfFile: file)
            case (nil, let text?):
                guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil else {
                    throw TandemError.invalidArgument("--jwks-url takes an http(s) URL, such as https://appleid.apple.com/auth/keys, not '\(text)'.")
                }
                var keysLogger = logger
                keysLogger[metadataKey: "jwks"] = .string(text)
                keys = try await TokenKeySet(url: url, logger: keysLogger)
            case (nil, nil):
                break
            case (_?, _?):
                throw TandemError.invalidArgument("--jwks-file and --jwks-url are two ways to give one key set: give one of them.")
            }
            if (tokenIssuer != nil || tokenAudience != nil), keys == nil {
                throw TandemError.invalidArgument("--token-issuer and --token-audience check an identity provider's tokens: give its key set too (--jwks-url or --jwks-file).")
            }
            if tokenClockSkew != nil, keys == nil, secret == nil {
                throw TandemError.invalidArgument("--token-clock-skew applies to tokens: give --jwks-url, --jwks-file or --auth-secret too.")
            }
            if let skew = tokenClockSkew, skew < 0 {
                throw TandemError.invalidArgument("--token-clock-skew is a number of seconds, 0 or more.")
            }
            let tokens: BearerTokens?
            if keys != nil || tokenIssuer != nil || tokenAudience != nil || tokenClockSkew != nil {
                tokens = try await BearerTokens(keys: keys, secret: secret, issuer: tokenIssuer, audience: tokenAudience,
                                                clockSkew: .seconds(tokenClockSkew ?? (keys == nil ? 0 : 60)))
            } else {
                tokens = try await secret.asyncMap { try await BearerTokens(secret: $0) }
            }
            let accessRules = try rules.map { try AccessRules(contentsOfFile: $0) }
            if tokens != nil || accessRules != nil {
                configuration.access = AccessControl(tokens: tokens, rules: accessRules ?? .ownDocuments)
            }
        } catch let error as TandemError {
            Console.error("error: \(error.code.rawValue): \(error.message)")
            throw ExitCode(2)
        }
        let note: String
        switch (secret != nil || jwksFile != nil || jwksURL != nil, rules) {
        case (true, nil): note = "bearer tokens required; each user reads and writes users/{uid} and below"
        case (true, let file?): note = "bearer tokens required; access follows the rules in \(file)"
        case (false, let file?): note = "no auth secret or key set: every caller is anonymous, and access follows the rules in \(file)"
        case (false, nil): note = "the server runs open; no access rules are enforced"
        }
        // An open server on an address others reach: anyone who can reach it reads and writes
        // everything. Said loudly, since --host 0.0.0.0 is the usual first try at "reach it from
        // my phone".
        let exposed = configuration.access == nil && !SyncServerConfiguration.isLoopback(host)
        let server = SyncServer(store: store, configuration: configuration) { host, port in
            Console.out("listening on \(scheme)://\(host):\(port)")
            Console.error("note: \(note)")
            if exposed {
                Console.error("""
                    WARNING: this server runs OPEN on \(host), an address other machines can reach: anyone who can \
                    connect to port \(port) can read, change and delete every document. Start it with --auth-secret \
                    (and --rules), or bind it to 127.0.0.1.
                    """)
            }
        }
        // Past three times the grace, the process ends whatever still runs: a shutdown finishes
        // whatever the database or the clients do.
        let grace = Duration.milliseconds(Int64(shutdownGrace * 1000))
        let groupConfiguration = ServiceGroupConfiguration(services: [
            .init(service: server),
            .init(service: ShutdownDeadline(grace: grace), successTerminationBehavior: .ignore),
        ], gracefulShutdownSignals: [.sigint, .sigterm], logger: logger)
        let group = ServiceGroup(configuration: groupConfiguration)
        do {
            try await group.run()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            Console.error("error: unavailable: port \(port) on \(host) is in use by another program (another tandem serve?). Stop it, or choose another port with --port (0 picks a free one).")
            throw ExitCode(1)
        } catch let error as IOError where error.errnoCode == EADDRNOTAVAIL || error.errnoCode == EACCES {
            Console.error("error: unavailable: cannot listen on \(host):\(port): \(String(cString: strerror(error.errnoCode))). Choose an address of this machine with --host, and a port above 1023 with --port.")
            throw ExitCode(1)
        } catch {
            Console.error("error: the server stopped: \(error)")
            throw ExitCode(1)
        }
    }
}

/// Ends the process three times the grace after a shutdown began, if it is still running then: a
/// part that does not end must not keep a stopped server's process alive.
struct ShutdownDeadline: Service {
    let grace: Duration

    func run() async throws {
        try? await gracefulShutdown()
        let grace = self.grace
        Task.detached {
            try? await Task.sleep(for: grace * 3)
            Console.error("error: the server did not stop within \(grace * 3) of being asked to; exiting")
            exit(1)
        }
    }
}

extension Optional {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
