// The harness runs PostgreSQL's programs under Linux's process and user model (setpriv).
#if os(Linux)
import Dispatch
import Foundation
import Synchronization
import TandemCore
import TandemServer
#if canImport(Glibc)
import Glibc
#endif

/// A private PostgreSQL server for tests: a new cluster (`initdb`) in a temporary directory,
/// listening on a free port of 127.0.0.1, trusting its one user (`tandem`), stopped and deleted by
/// ``stop()``. Started as an unprivileged user when the tests run as root (PostgreSQL refuses to
/// run as root): the `postgres` user when there is one, else `nobody`.
///
/// ```swift
/// let cluster = try await PostgresCluster.start()
/// defer { Task { await cluster.stop() } }
/// try await cluster.createDatabase("app")
/// let url = cluster.url(database: "app")   // postgres://tandem@127.0.0.1:PORT/app?sslmode=disable
/// ```
public final class PostgresCluster: Sendable {
    /// The folder of PostgreSQL's programs (`initdb`, `postgres`, `createdb`, `psql`):
    /// `TANDEM_POSTGRES_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else where `initdb` on
    /// the PATH leads. Nil when there is none.
    public static let binaries: URL? = {
        let fileManager = FileManager.default
        func usable(_ url: URL) -> Bool {
            fileManager.isExecutableFile(atPath: url.appendingPathComponent("initdb").path)
                && fileManager.isExecutableFile(atPath: url.appendingPathComponent("postgres").path)
        }
        if let given = ProcessInfo.processInfo.environment["TANDEM_POSTGRES_BIN"] {
            let url = URL(fileURLWithPath: given)
            return usable(url) ? url : nil
        }
        let versions = ((try? fileManager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted(by: >)
        for version in versions {
            let url = URL(fileURLWithPath: "/usr/lib/postgresql/\(version)/bin")
            if usable(url) { return url }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("initdb").resolvingSymlinksInPath()
            if fileManager.isExecutableFile(atPath: candidate.path), usable(candidate.deletingLastPathComponent()) {
                return candidate.deletingLastPathComponent()
            }
        }
        return nil
    }()

    /// Why clusters cannot start here (nil when they can): what a skipped test says.
    public static var unavailableReason: String? {
        binaries == nil ? "PostgreSQL's programs (initdb, postgres) were not found: install PostgreSQL, or set TANDEM_POSTGRES_BIN to their folder" : nil
    }

    /// The temporary directory holding the cluster's files, deleted by `stop()`.
    public let directory: URL
    /// The port the server listens on, on 127.0.0.1.
    public let port: Int
    /// The cluster's one user, trusted without a password.
    public let user = "tandem"
    private let bin: URL
    /// The unprivileged user's uid and gid when the tests run as root.
    private let runAs: (uid: UInt32, gid: UInt32)?
    private let server = Mutex<Server?>(nil)
    private let flushes: Bool

    private final class Server: Sendable {
        let process: ChildSpawn
        let exited: Ticket<Int32>
        init(process: ChildSpawn, exited: Ticket<Int32>) {
            self.process = process
            self.exited = exited
        }
    }

    private init(directory: URL, port: Int, bin: URL, runAs: (uid: UInt32, gid: UInt32)?, flushes: Bool) {
        self.flushes = flushes
        self.directory = directory
        self.port = port
        self.bin = bin
        self.runAs = runAs
    }

    /// Creates a cluster and starts its server; returns once it accepts connections.
    ///
    /// - Parameter flushes: whether the server flushes its writes to disk (`fsync`), as a
    ///   production server does: for benchmarks. Tests leave it off; a crash of PostgreSQL's
    ///   processes still loses nothing acknowledged, since the kernel keeps what was written.
    public static func start(flushes: Bool = false) async throws -> PostgresCluster {
        guard let bin = binaries else { throw ClusterError(message: unavailableReason ?? "PostgreSQL is not installed") }
        var runAs: (uid: UInt32, gid: UInt32)?
        if getuid() == 0 {
            guard let entry = getpwnam("postgres") ?? getpwnam("nobody") else {
                throw ClusterError(message: "PostgreSQL refuses to run as root, and there is no 'postgres' or 'nobody' user to run it as")
            }
            runAs = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        }
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if let runAs { chown(directory.path, runAs.uid, runAs.gid) }
        let cluster = PostgresCluster(directory: directory, port: try freePort(), bin: bin, runAs: runAs, flushes: flushes)
        do {
            let (status, output) = try await cluster.runTool("initdb", ["-D", cluster.dataDirectory.path, "-U", cluster.user, "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
            guard status == 0 else { throw ClusterError(message: "initdb failed (\(status)): \(output)") }
            try await cluster.startServer()
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        return cluster
    }

    private var dataDirectory: URL { directory.appendingPathComponent("data") }

    /// A URL for `database` on this cluster, TLS off.
    public func url(database: String) -> String {
        "postgres://\(user)@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// Creates an empty database.
    public func createDatabase(_ name: String) async throws {
        let (status, output) = try await runTool("createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", user, name])
        guard status == 0 else { throw ClusterError(message: "createdb \(name) failed (\(status)): \(output)") }
    }

    /// Runs SQL through `psql` on `database`; returns what it printed (unaligned, tuples only).
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") async throws -> String {
        let (status, output) = try await runTool("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", user, "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
        guard status == 0 else { throw ClusterError(message: "psql failed (\(status)): \(output)") }
        return output
    }

    /// Stops the server as a crash would (immediate shutdown: every connection dropped, nothing
    /// flushed, recovery at the next start), and waits until it is gone.
    public func crash() async {
        guard let server = server.withLock({ server -> Server? in defer { server = nil }; return server }) else { return }
        kill(server.process.processIdentifier, SIGQUIT)
        _ = try? await server.exited.value()
    }

    /// Starts the server again over the same data and port (after ``crash()``).
    public func restart() async throws {
        try await startServer()
    }

    /// Stops the server (fast shutdown) and deletes the cluster's files.
    public func stop() async {
        if let server = server.withLock({ server -> Server? in defer { server = nil }; return server }) {
            kill(server.process.processIdentifier, SIGINT)
            _ = try? await server.exited.value()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit {
        // A cluster dropped without ``stop()`` does not outlive the tests that made it.
        if let server = server.withLock({ $0 }) {
            kill(server.process.processIdentifier, SIGKILL)
            try? FileManager.default.removeItem(at: directory)
        }
    }

    // MARK: Processes

    private func startServer() async throws {
        // Tests lose nothing to a crash of PostgreSQL's processes without flushes to disk (the
        // kernel keeps what was written); a commit still waits until its WAL is written
        // (synchronous_commit on), as in production.
        let durability = flushes ? [] : ["-c", "fsync=off", "-c", "full_page_writes=off"]
        let process = makeProcess("postgres", ["-D", dataDirectory.path, "-p", String(port), "-k", directory.path,
                                               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
                                               "-c", "logging_collector=off"] + durability)
        let log = Pipe()
        process.standardError = log
        process.standardOutput = log
        let exited = Ticket<Int32>()
        process.terminationHandler = { exited.fulfill(.success($0.terminationStatus)) }
        let ready = Ticket<Void>()
        try process.run()
        server.withLock { $0 = Server(process: process, exited: exited) }
        // Its log is read to the end (a full pipe would stop the server); the line saying it
        // accepts connections is what the start waits for.
        let handle = log.fileHandleForReading
        DispatchQueue.global().async {
            var buffer = Data()
            var lines: [String] = []
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: 0x0A) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    lines.append(line)
                    if lines.count > 50 { lines.removeFirst() }
                    if line.contains("ready to accept connections") { ready.fulfill(.success(())) }
                }
            }
            try? handle.close()
            ready.fulfill(.failure(ClusterError(message: "postgres exited before it accepted connections: \(lines.joined(separator: "\n"))")))
        }
        // A server that never says it is ready (a recovery that does not end) fails the start
        // after a minute instead of holding the tests.
        let deadline = Task {
            try await Task.sleep(for: .seconds(60))
            ready.fulfill(.failure(ClusterError(message: "postgres did not accept connections within 60 s")))
        }
        defer { deadline.cancel() }
        do {
            try await ready.value()
        } catch {
            kill(process.processIdentifier, SIGKILL)
            server.withLock { $0 = nil }
            throw error
        }
    }

    private func makeProcess(_ tool: String, _ arguments: [String]) -> ChildSpawn {
        let process = ChildSpawn()
        let path = bin.appendingPathComponent(tool).path
        if let runAs {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(runAs.uid)", "--regid=\(runAs.gid)", "--clear-groups", "--", path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
        }
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C"
        environment.removeValue(forKey: "PGPASSWORD")
        process.environment = environment
        process.currentDirectoryURL = directory
        return process
    }

    /// Runs one of PostgreSQL's programs to the end; returns its status and what it printed.
    private func runTool(_ tool: String, _ arguments: [String]) async throws -> (Int32, String) {
        let process = makeProcess(tool, arguments)
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let exited = Ticket<Int32>()
        process.terminationHandler = { exited.fulfill(.success($0.terminationStatus)) }
        try process.run()
        let text = Ticket<String>()
        let handle = output.fileHandleForReading
        DispatchQueue.global().async {
            let data = handle.readDataToEndOfFile()
            // At its end: closed now, not whenever the pipe is freed.
            try? handle.close()
            text.fulfill(.success(String(decoding: data, as: UTF8.self)))
        }
        let printed = try await text.value()
        return (try await exited.value(), printed.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// A port of 127.0.0.1 nothing listens on now.
    private static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ClusterError(message: "no socket for a free port") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(socket, address, length) == 0 && getsockname(socket, address, &length) == 0
            }
        }
        guard bound else { throw ClusterError(message: "could not find a free port on 127.0.0.1") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Why a ``PostgresCluster`` could not start or answer.
public struct ClusterError: Error, CustomStringConvertible {
    /// What failed, with the output of the program that failed when there was one.
    public var message: String
    public var description: String { message }

    /// An error saying `message`.
    public init(message: String) { self.message = message }
}
#endif
