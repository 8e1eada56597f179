import ArgumentParser
import Foundation
import Logging
import Synchronization
import Tandem
import TandemCore

/// `tandem watch PATH …`: one JSON line per change.
struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print each change to a document or a query as a JSON line, until interrupted or --count changes.",
        discussion: #"Each line is {"type": "added|modified|removed", "path", "version", "data"}. The documents there at the start come as "added"."#
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "A document path, a collection path, or (with --group) a collection-group name.") var path: String
    @OptionGroup var options: QueryOptions
    @Option(help: "Stop after this many changes.") var count: Int?

    func run() async throws {
        try await reportingErrors {
            let target = try options.target(path, allowDocument: true)
            if let count, count <= 0 { throw TandemError.invalidArgument("--count must be at least 1.") }
            // A server that is not there is said at once (exit 1), as get says it, rather than
            // watched for in silence.
            _ = try await server.connection().call("GET", "/health")
            var configuration = TandemClientConfiguration()
            configuration.clientID = "cli-watch-\(UUID().uuidString.lowercased())"
            configuration.logger.logLevel = .critical
            configuration.token = server.bearerToken
            let client = TandemClient(url: URL(string: server.url)!, configuration: configuration)
            // Once watching, a lost connection is said on stderr, and so is its return: the
            // client reconnects with backoff and the listener resumes where it was.
            let connected = Mutex(false)
            let observation = client.observeConnection { event in
                switch event {
                case .disconnected:
                    if connected.withLock({ $0 }) {
                        Console.error("watch: the connection to \(server.url) was lost; reconnecting with backoff (Ctrl-C to stop)")
                    }
                case .resumed:
                    if connected.withLock({ was in defer { was = true }; return was }) {
                        Console.error("watch: reconnected to \(server.url); resuming from the last change printed")
                    }
                }
            }
            defer { observation.cancel() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await client.run() }
                group.addTask { try await Self.print(client.listen(target), count: count) }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    static func print(_ batches: AsyncThrowingStream<RemoteChangeBatch, any Error>, count: Int?) async throws {
        var known: Set<DocumentPath> = []
        var printed = 0
        for try await batch in batches {
            var changes = batch.changes
            if batch.isSnapshot {
                // A reset replaces what we had: what is gone is removed.
                let present = Set(changes.compactMap { $0.document == nil ? nil : $0.path })
                changes += known.subtracting(present).sorted().map { RemoteChange.removal($0, version: batch.version) }
            }
            for change in changes {
                let type: String
                if change.document == nil {
                    guard known.remove(change.path) != nil else { continue }
                    type = "removed"
                } else {
                    type = known.insert(change.path).inserted ? "added" : "modified"
                }
                Console.out(JSONText.encode([
                    "type": .string(type),
                    "path": .string(change.path.description),
                    "version": .int(Int(clamping: change.version.rawValue)),
                    "data": change.document.map { .object($0.data) } ?? .null,
                ]))
                printed += 1
                if let count, printed >= count { return }
            }
        }
    }
}
