import Foundation
import CoreMetrics
import Prometheus

/// `tandem bench metrics`: writing a scrape of many series, against the same text written by hand.
enum MetricsBenchmarks {
    /// `series` counters (one name, a label each) with values, written in Prometheus' text format
    /// through swift-prometheus, the best of `repetitions`, beside a loop appending the same lines
    /// to a byte buffer.
    static func run(series: Int, repetitions: Int) -> BenchReport {
        var report = BenchReport(title: "tandem bench metrics")
        let registry = PrometheusCollectorRegistry()
        let factory = PrometheusMetricsFactory(registry: registry)
        var counters: [CoreMetrics.Counter] = []
        for index in 0..<series {
            let counter = CoreMetrics.Counter(label: "tandem_bench_total", dimensions: [("series", "s\(index)")], factory: factory)
            counter.increment(by: index)
            counters.append(counter)
        }
        var emitted = 0
        let ours = bestTime(repetitions) {
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            emitted = buffer.count
        }
        var written = 0
        let values = (0..<series).map { ($0, "s\($0)") }
        let baseline = bestTime(repetitions) {
            var buffer: [UInt8] = []
            buffer.reserveCapacity(emitted)
            buffer.append(contentsOf: "# TYPE tandem_bench_total counter\n".utf8)
            for (value, label) in values {
                buffer.append(contentsOf: "tandem_bench_total{series=\"".utf8)
                buffer.append(contentsOf: label.utf8)
                buffer.append(contentsOf: "\"} ".utf8)
                buffer.append(contentsOf: String(value).utf8)
                buffer.append(UInt8(ascii: "\n"))
            }
            written = buffer.count
        }
        withExtendedLifetime(counters) {}
        report.add("metrics: a scrape of \(series) series (\(emitted) bytes) through swift-prometheus vs the same lines appended by hand (\(written) bytes)",
                   ours: ours, baseline: baseline, operations: series, unit: "series", target: nil)
        let milliseconds = ours.doubleSeconds * 1_000
        report.notes.append("metrics: \(series) series written in \(BenchReport.time(ours.doubleSeconds)) (target ≤ 5 ms: \(milliseconds <= 5 ? "meets" : "MISSES"))")
        return report
    }
}
