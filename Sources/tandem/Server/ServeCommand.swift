import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import TandemCore
import TandemServer

/// `tandem serve`: the sync server on the embedded SQLite store.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the sync server (WebSocket /v1/stream and the HTTP API) on an embedded SQLite database."
    )

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on (0 picks a free one).")
    var port = 8080

    @Option(name: .customLong("data-dir"), help: "The directory holding the database (created if missing).")
    var dataDirectory = "./.tandem"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "warning"

    @Option(name: .customLong("auth-secret"), help: "Require HS256 bearer tokens signed with this secret, at least 32 bytes (default: $TANDEM_AUTH_SECRET). Without one the server runs open.")
    var authSecret: String?

    func run() async throws {
        var logger = Logger(label: "tandem.server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .warning
        let store: SQLiteServerStore
        do {
            store = try SQLiteServerStore(directory: URL(fileURLWithPath: dataDirectory))
        } catch {
            Console.error("error: \(error)")
            throw ExitCode(2)
        }
        var configuration = SyncServerConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.logger = logger
        if let secret = authSecret ?? ProcessInfo.processInfo.environment["TANDEM_AUTH_SECRET"].flatMap({ $0.isEmpty ? nil : $0 }) {
            do {
                configuration.access = AccessControl(tokens: try await BearerTokens(secret: secret))
            } catch let error as TandemError {
                Console.error("error: \(error.code.rawValue): \(error.message)")
                throw ExitCode(2)
            }
        }
        let secured = configuration.access != nil
        let server = SyncServer(store: store, configuration: configuration) { host, port in
            Console.out("listening on http://\(host):\(port)")
            if secured {
                Console.error("note: bearer tokens required; each user reads and writes users/{uid} and below")
            } else {
                Console.error("note: the server runs open; no access rules are enforced")
            }
        }
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigint, .sigterm], logger: logger)
        do {
            try await group.run()
        } catch {
            Console.error("error: the server stopped: \(error)")
            throw ExitCode(1)
        }
    }
}
