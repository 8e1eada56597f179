import Foundation
import Logging
import NIOSSL
import ServiceLifecycle
import Tandem
import TandemCore
import TandemPostgres
import TandemServer

/// The code of the TandemServer article "Running a server" (`RunningAServer.md`). Compiled, not
/// run: these functions serve until the process is signalled, or need certificate files and a
/// PostgreSQL database.
enum RunningAServerSnippets {
    static func embed(logger: Logger) async throws {
        // snippet: running-a-server-embed
        let store = try SQLiteServerStore(directory: URL(fileURLWithPath: ".tandem"))
        let server = SyncServer(store: store) { host, port in print("listening on http://\(host):\(port)") }
        try await ServiceGroup(services: [server], gracefulShutdownSignals: [.sigint, .sigterm], logger: logger).run()
        // end snippet
    }

    static func configure(secret: String) async throws -> SyncServer {
        // snippet: running-a-server-configuration
        var storeConfiguration = SQLiteServerStoreConfiguration()
        storeConfiguration.tombstoneRetention = .seconds(7 * 24 * 3600)   // resume points and answers kept a week
        let store = try SQLiteServerStore(directory: URL(fileURLWithPath: "/var/lib/notes-sync"), configuration: storeConfiguration)

        var configuration = SyncServerConfiguration()
        configuration.host = "0.0.0.0"
        configuration.port = 8443
        configuration.tls = try SyncServerConfiguration.tls(certificateFile: "server.pem", keyFile: "server-key.pem")
        configuration.access = AccessControl(tokens: try await BearerTokens(secret: secret))
        configuration.limits.maximumWritesPerSecondPerUser = 1_000
        configuration.console = false
        let server = SyncServer(store: store, configuration: configuration)
        // end snippet
        return server
    }

    static func postgres() async throws -> SyncServer {
        // snippet: running-a-server-postgres
        var storeConfiguration = PostgresServerStoreConfiguration()
        storeConfiguration.maximumConnections = 40
        let store = try await PostgresServerStore.open(
            url: try PostgresURL("postgres://tandem@db.internal:5432/tandem?sslmode=verify-full"),
            configuration: storeConfiguration)
        let server = SyncServer(store: store)
        // end snippet
        return server
    }

    static func tlsClient() throws -> TandemClient {
        // snippet: running-a-server-tls-client
        var configuration = TandemClientConfiguration()
        configuration.tlsConfiguration = .makeClientConfiguration()
        configuration.tlsConfiguration?.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile("authority.pem"))
        let client = TandemClient(url: URL(string: "https://sync.example.com")!, configuration: configuration)
        // end snippet
        return client
    }
}
