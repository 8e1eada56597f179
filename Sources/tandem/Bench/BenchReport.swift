import TandemCore

/// Benchmark figures beside their baselines, with the target each is held to.
struct BenchReport {
    struct Row {
        var name: String
        var figure: String
        var baseline: String
        /// Our time divided by the baseline's (lower is better).
        var ratio: Double
        /// The most `ratio` may be; nil for a figure shown for information.
        var target: Double?
    }

    var title: String
    var rows: [Row] = []
    /// Figures without a same-run baseline (latencies, rates), printed as they are.
    var notes: [String] = []

    mutating func add(_ name: String, ours: Duration, baseline: Duration, operations: Int, unit: String, target: Double?) {
        let oursSeconds = ours.doubleSeconds
        let baseSeconds = baseline.doubleSeconds
        rows.append(Row(
            name: name,
            figure: "\(Self.rate(Double(operations) / oursSeconds)) \(unit)/s (\(Self.time(oursSeconds)))",
            baseline: "\(Self.rate(Double(operations) / baseSeconds)) \(unit)/s (\(Self.time(baseSeconds)))",
            ratio: oursSeconds / baseSeconds,
            target: target
        ))
    }

    func print() {
        #if DEBUG
        Swift.print("note: debug build; run `swift run -c release tandem bench …` for meaningful figures")
        #endif
        Swift.print(title)
        for row in rows {
            let verdict: String
            if let target = row.target {
                verdict = "target ≤ \(String(format2: target))×: " + (row.ratio <= target ? "meets" : "MISSES")
            } else {
                verdict = "for information, no target"
            }
            Swift.print("""
                - \(row.name)
                    tandem:   \(row.figure)
                    baseline: \(row.baseline)
                    time ratio \(String(format2: row.ratio))× (\(verdict))
                """)
        }
        for note in notes {
            Swift.print("- \(note)")
        }
    }

    static func rate(_ value: Double) -> String {
        if value >= 1_000_000 { return "\(String(format2: value / 1_000_000))M" }
        if value >= 1_000 { return "\(String(format2: value / 1_000))k" }
        return String(format2: value)
    }

    static func time(_ seconds: Double) -> String {
        if seconds >= 1 { return "\(String(format2: seconds)) s" }
        if seconds < 0.000_1 { return "\(String(format2: seconds * 1_000_000)) µs" }
        return "\(String(format2: seconds * 1_000)) ms"
    }
}

extension String {
    /// A number with two decimals, without Foundation's formatters.
    init(format2 value: Double) {
        let scaled = (value * 100).rounded()
        let whole = Int(scaled / 100)
        let cents = Int(abs(scaled).truncatingRemainder(dividingBy: 100))
        self = "\(value < 0 && whole == 0 ? "-" : "")\(whole).\(cents < 10 ? "0" : "")\(cents)"
    }
}

/// Runs `body` `repetitions` times and returns the best time.
func bestTime(_ repetitions: Int, _ body: () throws -> Void) rethrows -> Duration {
    let clock = ContinuousClock()
    var best = Duration.seconds(Int64.max)
    for _ in 0..<repetitions {
        let elapsed = try clock.measure(body)
        best = min(best, elapsed)
    }
    return best
}
