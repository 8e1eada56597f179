import Foundation
import PostgresNIO
import TandemCore

/// Where a PostgreSQL database is and how to sign in to it, read from a connection URL:
/// `postgres://user:password@host:5432/database?sslmode=disable` (`postgresql://` too).
///
/// `sslmode` is `disable`, `prefer` (the default: TLS when the server offers it) or `require`.
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
        username = user.removingPercentEncoding ?? user
        password = components.password.map { $0.removingPercentEncoding ?? $0 } ?? environment["PGPASSWORD"]
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? nil : (path.removingPercentEncoding ?? path)
        sslMode = .prefer
        for item in components.queryItems ?? [] where item.name == "sslmode" {
            guard let value = item.value, let mode = SSLMode(rawValue: value) else {
                throw TandemError.invalidArgument("sslmode '\(item.value ?? "")' is not one of disable, prefer, require.")
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

    /// The settings of one connection.
    func connectionConfiguration(connectTimeout: Duration) throws -> PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: try connectionTLS())
        configuration.options.connectTimeout = .nanoseconds(Int64(connectTimeout.components.seconds) * 1_000_000_000 + connectTimeout.components.attoseconds / 1_000_000_000)
        return configuration
    }

    /// The settings of a pool of connections.
    func clientConfiguration(connectTimeout: Duration, maximumConnections: Int) throws -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(host: host, port: port, username: username, password: password, database: database, tls: try clientTLS())
        configuration.options.connectTimeout = connectTimeout
        configuration.options.maximumConnections = max(1, maximumConnections)
        return configuration
    }

    private func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        switch sslMode {
        case .disable: return .disable
        case .prefer: return .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: return .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
    }

    private func clientTLS() throws -> PostgresClient.Configuration.TLS {
        switch sslMode {
        case .disable: return .disable
        case .prefer: return .prefer(.makeClientConfiguration())
        case .require: return .require(.makeClientConfiguration())
        }
    }
}
