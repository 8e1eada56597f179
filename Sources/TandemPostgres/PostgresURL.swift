import Foundation
import PostgresNIO
import TandemCore

/// Where a PostgreSQL database is and how to sign in to it, read from a connection URL:
/// `postgres://user:password@host:5432/database?sslmode=disable` (`postgresql://` too).
///
/// `sslmode` is as libpq's: `disable`; `prefer` (the default: TLS when the server offers it),
/// `require` (TLS or nothing), neither checking the server's certificate; or `verify-full` (TLS,
/// with the certificate checked against the system's trust roots and the host name).
/// The password may instead come from the `PGPASSWORD` environment variable.
public struct PostgresURL: Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String?
    public var sslMode: SSLMode

    public enum SSLMode: String, Sendable {
        case disable, prefer, require
        case verifyFull = "verify-full"
    }

    /// Reads `text`; anything it cannot use is an `invalid-argument` saying what to write instead.
    public init(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(TandemError) {
        let example = "postgres://user:password@127.0.0.1:5432/database"
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw TandemError.invalidArgument("'\(Self.redacted(text))' is not a PostgreSQL URL; write one like \(example).")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw TandemError.invalidArgument("A PostgreSQL URL starts with postgres:// (this one starts with \(scheme)://); write one like \(example).")
        }
        guard let host = components.host, !host.isEmpty else {
            throw TandemError.invalidArgument("The PostgreSQL URL names no host; write one like \(example).")
        }
        guard let user = components.user, !user.isEmpty else {
            throw TandemError.invalidArgument("The PostgreSQL URL names no user; write one like \(example).")
        }
        self.host = host
        port = components.port ?? 5432
        // URLComponents decodes percent escapes in each of these already.
        username = user
        password = components.password ?? environment["PGPASSWORD"]
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? nil : path
        sslMode = .prefer
        for item in components.queryItems ?? [] where item.name == "sslmode" {
            guard let value = item.value, let mode = SSLMode(rawValue: value) else {
                throw TandemError.invalidArgument("sslmode '\(item.value ?? "")' is not one of disable, prefer, require, verify-full.")
            }
            sslMode = mode
        }
    }

    /// The URL with its password left out: what messages and logs show.
    public var description: String {
        "postgres://\(username)@\(host):\(port)/\(database ?? "")"
    }

    static func redacted(_ text: String) -> String {
        guard var components = URLComponents(string: text), components.password != nil else { return text }
        components.password = "…"
        return components.string ?? "the URL given"
    }

    /// The settings of one connection to this URL's database, with the store's session limits
    /// (``sessionSettings(statementTimeout:)``).
    public func connectionConfiguration(connectTimeout: Duration, statementTimeout: Duration? = nil) throws -> PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: try connectionTLS())
        configuration.options.additionalStartupParameters = Self.sessionSettings(statementTimeout: statementTimeout)
        configuration.options.connectTimeout = .nanoseconds(Int64(connectTimeout.components.seconds) * 1_000_000_000 + connectTimeout.components.attoseconds / 1_000_000_000)
        return configuration
    }

    /// The settings of a pool of connections to this URL's database (at least two), with the
    /// store's session limits (``sessionSettings(statementTimeout:)``): for a `PostgresClient` beside the store's.
    public func clientConfiguration(connectTimeout: Duration, maximumConnections: Int, statementTimeout: Duration? = nil) throws -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(host: host, port: port, username: username, password: password, database: database, tls: try clientTLS())
        configuration.options.connectTimeout = connectTimeout
        // One connection listens for other nodes' commits; at least one more serves the rest.
        configuration.options.maximumConnections = max(2, maximumConnections)
        configuration.options.additionalStartupParameters = Self.sessionSettings(statementTimeout: statementTimeout)
        return configuration
    }

    /// Each session's settings:
    /// - a node that stops (paused, cut off) while it holds the version counter's lock loses its
    ///   transaction after 60 s idle in it, instead of holding every node's commits until TCP gives
    ///   up on it (hours);
    /// - a commit that waits 15 s for a lock fails with `unavailable`, to be sent again;
    /// - the store's prepared statements (a commit's read and write) are planned once per
    ///   connection, not at each commit: every part of them reads through an index whatever the
    ///   values bound, and planning them again cost more than running them.
    /// - with a `statementTimeout`, PostgreSQL cancels any statement that runs longer (its
    ///   transaction rolls back, nothing of it kept), so a statement a node gave up on never takes
    ///   effect after the caller was told it failed.
    public static func sessionSettings(statementTimeout: Duration? = nil) -> [(String, String)] {
        var settings = [("idle_in_transaction_session_timeout", "60s"), ("lock_timeout", "15s"), ("plan_cache_mode", "force_generic_plan")]
        if let statementTimeout {
            let milliseconds = max(1, statementTimeout.components.seconds * 1000 + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
            settings.append(("statement_timeout", "\(milliseconds)ms"))
        }
        return settings
    }

    /// TLS as libpq does it: `prefer` and `require` encrypt without checking the certificate
    /// (servers commonly offer a self-signed one); `verify-full` checks it.
    private func tlsConfiguration() -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if sslMode != .verifyFull { configuration.certificateVerification = .none }
        return configuration
    }

    private func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        switch sslMode {
        case .disable: return .disable
        case .prefer: return .prefer(try NIOSSLContext(configuration: tlsConfiguration()))
        case .require, .verifyFull: return .require(try NIOSSLContext(configuration: tlsConfiguration()))
        }
    }

    private func clientTLS() throws -> PostgresClient.Configuration.TLS {
        switch sslMode {
        case .disable: return .disable
        case .prefer: return .prefer(tlsConfiguration())
        case .require, .verifyFull: return .require(tlsConfiguration())
        }
    }
}
