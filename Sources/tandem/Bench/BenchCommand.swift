import Foundation
import ArgumentParser

/// `tandem bench …`: speed figures, each printed beside a baseline measured in the same run.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Run benchmarks; each figure is printed beside a baseline measured in the same run.",
        discussion: "Build in release mode for meaningful figures: swift run -c release tandem bench core",
        subcommands: [CoreBench.self, EnginesBench.self, ServerBench.self, ReconcileBench.self, SyncedBench.self, ChangesBench.self, MetricsBench.self]
    )
}

struct CoreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "core",
        abstract: "Identity-map updates and query evaluation against hand-written baselines."
    )

    @Option(help: "Documents for the query benchmark.")
    var documents = 100_000

    @Option(help: "Updates for the identity-map benchmark.")
    var updates = 200_000

    @Option(help: "Repetitions; the best time of each is reported.")
    var repetitions = 5

    func validate() throws {
        guard documents > 0, updates > 0, repetitions > 0 else {
            throw ValidationError("--documents, --updates and --repetitions must be positive.")
        }
    }

    func run() async throws {
        var report = BenchReport(title: "tandem bench core")
        CoreBenchmarks.identityMap(updates: updates, repetitions: repetitions, into: &report)
        try CoreBenchmarks.query(documents: documents, repetitions: repetitions, into: &report)
        report.print()
    }
}

struct EnginesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "engines",
        abstract: "Engine cold start, remote-change latency and outbox flush rate."
    )

    @Option(help: "Documents cached.")
    var documents = 100_000

    @Option(help: "Repetitions of the cold start; the best time is reported.")
    var repetitions = 3

    @Flag(help: "Measure only the cold start (for profiling it).")
    var coldStartOnly = false

    @Flag(help: "Measure only the offline replay to a real server (for profiling it).")
    var replayOnly = false

    @Flag(help: "Measure only one local write until durably queued (for profiling it).")
    var localWriteOnly = false

    @Flag(help: "Measure only one remote change with the documents cached (for profiling it).")
    var remoteChangeOnly = false

    func validate() throws {
        guard documents > 0, repetitions > 0 else {
            throw ValidationError("--documents and --repetitions must be positive.")
        }
    }

    func run() async throws {
        try await EngineBenchmarks.run(documents: documents, repetitions: repetitions, coldStartOnly: coldStartOnly, replayOnly: replayOnly, localWriteOnly: localWriteOnly, remoteChangeOnly: remoteChangeOnly).print()
    }
}

struct ServerBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Server write throughput, commit-to-listener latency and initial sync, over real sockets on loopback."
    )

    @Option(help: "Documents in the initial-sync collection.")
    var documents = 100_000

    @Option(help: "Writes by the single client (the 16 clients write twice as many in all).")
    var writes = 2_000

    @Option(help: "Connections per cycle of the memory part.")
    var connections = 2_000

    @Option(help: "Run one part only (for profiling): writes, fanout, latency, sync or connections.")
    var only: String?

    @Flag(help: "Measure what access control costs: writes and latency with an auth secret and a 20-rule file beside the open server's.")
    var auth = false

    @Option(help: "Measure the server on PostgreSQL: writes beside postgres-nio's inserts, and latency on one node and from one node to another, beside SQLite's figures. Give a database URL (the run leaves its documents there), or 'private' to start a private cluster for the run (Linux).")
    var postgres: String?

    @Option(help: "With --postgres: rounds of the write figures, run in turns with their baselines; each figure is the fastest.")
    var rounds = 3

    @Option(help: "With --postgres: commits timed by each latency figure.")
    var latencyCommits = 200

    func validate() throws {
        guard documents > 0, writes > 0, connections > 0 else {
            throw ValidationError("--documents, --writes and --connections must be positive.")
        }
        if let only, !["writes", "fanout", "latency", "sync", "connections"].contains(only) {
            throw ValidationError("--only takes writes, fanout, latency, sync or connections.")
        }
        guard rounds > 0, latencyCommits > 0 else { throw ValidationError("--rounds and --latency-commits must be positive.") }
        if postgres != nil {
            if auth { throw ValidationError("--postgres and --auth go separately.") }
            if let only, !["writes", "latency"].contains(only) { throw ValidationError("With --postgres, --only takes writes or latency.") }
        }
    }

    func run() async throws {
        if let postgres {
            try await PostgresBenchmarks.run(url: postgres == "private" ? nil : postgres, writes: writes, rounds: rounds, latencyCommits: latencyCommits, only: only).print()
            return
        }
        try await ServerBenchmarks.run(documents: documents, writes: writes, connections: connections, only: only, auth: auth).print()
    }
}

struct ReconcileBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Reconciling a payload into an app's GRDB table, against a hand-written SQL upsert of the same change."
    )

    @Option(help: "Rows in the table, and DTOs in the payload.")
    var rows = 100_000

    @Option(help: "Repetitions of each side; the best time is reported.")
    var repetitions = 3

    func validate() throws {
        guard rows >= 20, repetitions > 0 else {
            throw ValidationError("--rows must be at least 20 and --repetitions positive.")
        }
    }

    func run() async throws {
        try await ReconcileBenchmarks.run(rows: rows, repetitions: repetitions).print()
    }
}

struct SyncedBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "synced",
        abstract: "Synced state: one edit of a large SyncedCollection, and a remote batch applied to it, beside the engine doing the same."
    )

    @Option(help: "Elements in the collection.")
    var elements = 10_000

    @Option(help: "Edits measured.")
    var edits = 1_000

    @Option(help: "Changes in the remote batch.")
    var batch = 1_000

    func validate() throws {
        guard elements > 0, edits > 0, batch > 0, batch <= elements else {
            throw ValidationError("--elements, --edits and --batch must be positive, and --batch at most --elements.")
        }
    }

    func run() async throws {
        try await SyncedBenchmarks.run(elements: elements, edits: edits, batch: batch).print()
    }
}

struct ChangesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "changes",
        abstract: "ChangeSyncEngine: records sent and fetched, plain and encrypted, beside the same records through POST /v1/commit and GET /v1/changes."
    )

    @Option(help: "Records sent and fetched each way.")
    var records = 100_000

    @Option(help: "Rounds, each on a fresh server; each figure is the best of them.")
    var rounds = 3

    func validate() throws {
        guard records > 0 else { throw ValidationError("--records must be positive.") }
        guard rounds > 0 else { throw ValidationError("--rounds must be positive.") }
    }

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-changes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await ChangeSyncBenchmarks.run(records: records, rounds: rounds, directory: directory).print()
    }
}

struct MetricsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "A /metrics scrape of many series through swift-prometheus, beside the same lines written by hand."
    )

    @Option(help: "Series in the scrape.")
    var series = 5_000

    @Option(help: "Repetitions; the best time of each is reported.")
    var repetitions = 20

    func validate() throws {
        guard series > 0, repetitions > 0 else { throw ValidationError("--series and --repetitions must be positive.") }
    }

    func run() async throws {
        MetricsBenchmarks.run(series: series, repetitions: repetitions).print()
    }
}
