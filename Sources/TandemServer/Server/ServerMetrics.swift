import CoreMetrics
import Foundation
import Prometheus
import Synchronization
import TandemCore

/// What a server counts, in swift-metrics' types over a registry of its own, which `GET /metrics`
/// writes in Prometheus' text format. One per server, so two servers in one process (tests, an app
/// embedding one) keep their counts apart; nothing is bootstrapped globally.
///
/// | Metric | Type | What |
/// |---|---|---|
/// | `tandem_commits_total{outcome}` | counter | write requests decided: `committed` (written at a new version), `refused` (every new mutation refused: rules, preconditions, sequences; nothing written), `replayed` (answered from earlier decisions alone), `failed` (the store could not decide; nothing written) |
/// | `tandem_mutations_total{outcome}` | counter | the mutations of committed requests, by answer: `applied`, `replayed`, `refused`, `unknown` |
/// | `tandem_commit_duration_seconds` | histogram | from a request reaching the store to its answer, from 50 µs |
/// | `tandem_group_commit_requests` | histogram | write requests that shared one group commit |
/// | `tandem_fanout_latency_seconds` | histogram | from the store telling the server of a commit to its changes queued on every listener's connection, from 50 µs |
/// | `tandem_errors_total{code}` | counter | error answers sent, HTTP and stream, by code |
/// | `tandem_rate_limited_total` | counter | requests refused for going over a rate (`resource-exhausted` with `retryAfter`) |
/// | `tandem_slow_consumers_disconnected_total` | counter | connections closed for reading too slowly |
/// | `tandem_received_bytes_total`, `tandem_sent_bytes_total` | counter | stream messages' bytes, in and out |
/// | `tandem_listeners`, `tandem_stream_sessions`, `tandem_commit_version`, `tandem_store_bytes` | gauge | now, at the scrape |
/// | `tandem_start_time_seconds` | gauge | when the server's metrics began (it started), in seconds since 1970 |
public final class ServerMetrics: Sendable {
    /// Where the metrics are kept: `emitToString()` writes them in Prometheus' text format.
    public let registry: PrometheusCollectorRegistry
    private let committed: CoreMetrics.Counter
    private let refused: CoreMetrics.Counter
    private let replayed: CoreMetrics.Counter
    private let failed: CoreMetrics.Counter
    private let mutations: [WriteStatus: CoreMetrics.Counter]
    private let commitDuration: CoreMetrics.Timer
    private let groupSize: Recorder
    private let fanOutLatency: CoreMetrics.Timer
    private let errors: [TandemError.Code: CoreMetrics.Counter]
    private let otherErrors: CoreMetrics.Counter
    private let rateLimited: CoreMetrics.Counter
    private let slowConsumers: CoreMetrics.Counter
    private let receivedBytes: CoreMetrics.Counter
    private let sentBytes: CoreMetrics.Counter
    private let listeners: CoreMetrics.Gauge
    private let sessions: CoreMetrics.Gauge
    private let version: CoreMetrics.Gauge
    private let storeBytes: CoreMetrics.Gauge

    /// The buckets of both latency histograms: 50 µs to 10 s (the library's defaults start at
    /// 5 ms, coarser than a fan-out takes).
    public static let latencyBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(10),
    ]

    /// Metrics over a registry of their own, every count at zero; `tandem_start_time_seconds` is
    /// set to now.
    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.latencyBuckets
        factory.valueHistogramBuckets["tandem_group_commit_requests"] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        committed = CoreMetrics.Counter(label: "tandem_commits_total", dimensions: [("outcome", "committed")], factory: factory)
        refused = CoreMetrics.Counter(label: "tandem_commits_total", dimensions: [("outcome", "refused")], factory: factory)
        replayed = CoreMetrics.Counter(label: "tandem_commits_total", dimensions: [("outcome", "replayed")], factory: factory)
        failed = CoreMetrics.Counter(label: "tandem_commits_total", dimensions: [("outcome", "failed")], factory: factory)
        mutations = Dictionary(uniqueKeysWithValues: WriteStatus.allCases.map { status in
            (status, CoreMetrics.Counter(label: "tandem_mutations_total", dimensions: [("outcome", status.rawValue)], factory: factory))
        })
        commitDuration = CoreMetrics.Timer(label: "tandem_commit_duration_seconds", factory: factory)
        groupSize = Recorder(label: "tandem_group_commit_requests", factory: factory)
        fanOutLatency = CoreMetrics.Timer(label: "tandem_fanout_latency_seconds", factory: factory)
        errors = Dictionary(uniqueKeysWithValues: TandemError.Code.all.map { code in
            (code, CoreMetrics.Counter(label: "tandem_errors_total", dimensions: [("code", code.rawValue)], factory: factory))
        })
        otherErrors = CoreMetrics.Counter(label: "tandem_errors_total", dimensions: [("code", "other")], factory: factory)
        rateLimited = CoreMetrics.Counter(label: "tandem_rate_limited_total", factory: factory)
        slowConsumers = CoreMetrics.Counter(label: "tandem_slow_consumers_disconnected_total", factory: factory)
        receivedBytes = CoreMetrics.Counter(label: "tandem_received_bytes_total", factory: factory)
        sentBytes = CoreMetrics.Counter(label: "tandem_sent_bytes_total", factory: factory)
        listeners = CoreMetrics.Gauge(label: "tandem_listeners", factory: factory)
        sessions = CoreMetrics.Gauge(label: "tandem_stream_sessions", factory: factory)
        version = CoreMetrics.Gauge(label: "tandem_commit_version", factory: factory)
        storeBytes = CoreMetrics.Gauge(label: "tandem_store_bytes", factory: factory)
        CoreMetrics.Gauge(label: "tandem_start_time_seconds", factory: factory).record(Date().timeIntervalSince1970)
    }

    /// Counts the answers to write requests that reached the store, and how long they took.
    func committed(_ results: some Sequence<Result<CommitResult, TandemError>>, in duration: Duration) {
        commitDuration.recordNanoseconds(duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
        for result in results {
            switch result {
            case .success(let result):
                // Committed only when it wrote: a request the rules or a precondition refused
                // wrote nothing, and one answered from earlier decisions was committed before.
                if result.batch != nil {
                    committed.increment()
                } else if result.refusal != nil {
                    refused.increment()
                } else {
                    replayed.increment()
                }
                for acknowledgement in result.acknowledgements { mutations[acknowledgement.status]?.increment() }
            case .failure(let error):
                // Refused before anything was decided (a writer id another caller owns, a request
                // that is not valid), or the store could not decide (it is down).
                if [.unavailable, .internal, .deadlineExceeded, .dataLoss, .unknown, .cancelled, .aborted].contains(error.code) {
                    failed.increment()
                } else {
                    refused.increment()
                }
            }
        }
    }

    /// Counts an error answer sent, HTTP or stream.
    func answered(_ error: TandemError) {
        (errors[error.code] ?? otherErrors).increment()
        if error.code == .resourceExhausted, error.retryAfter != nil { rateLimited.increment() }
    }

    func delivered(after latency: Duration) {
        fanOutLatency.recordNanoseconds(latency.components.seconds * 1_000_000_000 + latency.components.attoseconds / 1_000_000_000)
    }

    func grouped(_ requests: Int) { groupSize.record(requests) }
    func disconnectedSlowConsumer() { slowConsumers.increment() }
    func received(bytes: Int) { receivedBytes.increment(by: bytes) }
    func sent(bytes: Int) { sentBytes.increment(by: bytes) }

    /// The metrics in Prometheus' text format, with the gauges read now.
    func scrape(listeners: Int, sessions: Int, version: Version, storeBytes: Int?) -> [UInt8] {
        if let storeBytes { self.storeBytes.record(storeBytes) }
        self.listeners.record(listeners)
        self.sessions.record(sessions)
        self.version.record(Int64(bitPattern: version.rawValue))
        return Self.withHelp(registry.emitToBuffer())
    }

    /// What each metric counts, for its `# HELP` line (metrics made through swift-metrics'
    /// factory have none of their own).
    static let help: [String: String] = [
        "tandem_commits_total": "Write requests decided, by outcome: committed (written at a new version), refused (nothing written), replayed (answered from earlier decisions), failed (the store could not decide).",
        "tandem_mutations_total": "Mutations of decided write requests, by answer: applied, replayed, refused, unknown.",
        "tandem_commit_duration_seconds": "From a write request reaching the store to its answer.",
        "tandem_group_commit_requests": "Write requests that shared one group commit.",
        "tandem_fanout_latency_seconds": "From the store telling the server of a commit to its changes queued on every listener's connection.",
        "tandem_errors_total": "Error answers sent over HTTP and the stream, by code.",
        "tandem_rate_limited_total": "Requests refused for going over a rate (resource-exhausted with retryAfter).",
        "tandem_slow_consumers_disconnected_total": "Stream connections closed for reading too slowly.",
        "tandem_received_bytes_total": "Bytes of stream messages received.",
        "tandem_sent_bytes_total": "Bytes of stream messages sent.",
        "tandem_listeners": "Live listeners, at the scrape.",
        "tandem_stream_sessions": "Open stream sessions, at the scrape.",
        "tandem_commit_version": "The newest committed version, at the scrape.",
        "tandem_store_bytes": "The store's size on disk in bytes, at the scrape.",
        "tandem_start_time_seconds": "When the server started, in seconds since 1970.",
    ]

    /// The scrape with a `# HELP` line before each metric's `# TYPE` line.
    static func withHelp(_ scrape: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(scrape.count + 2048)
        let prefix = Array("# TYPE ".utf8)
        for line in scrape.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            if line.starts(with: prefix), let end = line.dropFirst(prefix.count).firstIndex(of: UInt8(ascii: " ")),
               let text = help[String(decoding: line[line.startIndex + prefix.count..<end], as: UTF8.self)] {
                output += Array("# HELP ".utf8) + line[line.startIndex + prefix.count..<end] + Array(" \(text)\n".utf8)
            }
            output += line
            output.append(UInt8(ascii: "\n"))
        }
        // split keeps what follows the last newline: one newline too many was added.
        if output.last == UInt8(ascii: "\n"), scrape.last == UInt8(ascii: "\n") || scrape.isEmpty { output.removeLast() }
        return output
    }
}
