import CoreMetrics
import Synchronization
import TandemCore

/// What the client side reports through swift-metrics, to whatever backend the app uses (Prometheus,
/// StatsD, OpenTelemetry…). Off unless given: set ``TandemClientConfiguration/metrics`` and the
/// client, and every engine bound to it through a `TandemRemote…Service`, report through it.
///
/// ```swift
/// MetricsSystem.bootstrap(myFactory)            // once, in the app
/// var configuration = TandemClientConfiguration()
/// configuration.metrics = ClientMetrics()         // MetricsSystem.factory, or ClientMetrics(factory:)
/// ```
///
/// | Metric | Type | What |
/// |---|---|---|
/// | `tandem_client_reconnects_total` | counter | connection attempts after the first: each try to get back a connection that dropped or failed |
/// | `tandem_client_outbox_depth{engine}` | gauge | writes waiting in an engine's outbox for the server's answer, by the engine's `managerKey` |
/// | `tandem_client_rejected_writes_total{engine, code}` | counter | writes the server refused for good, which the engine rolled back and lists in `rejectedWrites` |
///
/// `dimensions` are added to every metric (an app with several clients can tell them apart).
public struct ClientMetrics: Sendable {
    let factory: any MetricsFactory
    let dimensions: [(String, String)]
    let reconnects: CoreMetrics.Counter

    /// Metrics made by `factory` (by default the one `MetricsSystem.bootstrap` installed), each with
    /// `dimensions` added to its own.
    public init(factory: any MetricsFactory = MetricsSystem.factory, dimensions: [(String, String)] = []) {
        self.factory = factory
        self.dimensions = dimensions
        reconnects = CoreMetrics.Counter(label: "tandem_client_reconnects_total", dimensions: dimensions, factory: factory)
    }

    /// The metrics of one engine.
    func engine(_ managerKey: String) -> EngineMetrics {
        EngineMetrics(metrics: self, engine: managerKey)
    }
}

/// One engine's share of ``ClientMetrics``: its outbox's depth and the writes refused to it.
final class EngineMetrics: Sendable {
    let outboxDepth: CoreMetrics.Gauge
    /// The generation of the engine snapshot whose depth was reported last: a publisher that lost
    /// a race reports nothing older over something newer.
    let reported = Mutex<UInt64>(0)
    let rejected: [TandemError.Code: CoreMetrics.Counter]
    let otherRejected: CoreMetrics.Counter

    init(metrics: ClientMetrics, engine: String) {
        let dimensions = metrics.dimensions + [("engine", engine)]
        outboxDepth = CoreMetrics.Gauge(label: "tandem_client_outbox_depth", dimensions: dimensions, factory: metrics.factory)
        rejected = Dictionary(uniqueKeysWithValues: TandemError.Code.all.map { code in
            (code, CoreMetrics.Counter(label: "tandem_client_rejected_writes_total", dimensions: dimensions + [("code", code.rawValue)], factory: metrics.factory))
        })
        otherRejected = CoreMetrics.Counter(label: "tandem_client_rejected_writes_total", dimensions: dimensions + [("code", "other")], factory: metrics.factory)
    }

    func rejected(_ error: TandemError) {
        (rejected[error.code] ?? otherRejected).increment()
    }
}
