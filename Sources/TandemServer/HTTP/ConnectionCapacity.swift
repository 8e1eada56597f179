import Synchronization
import TandemCore

/// The connections a server serves at once, and a few more kept for its health probes: at the cap
/// a server must still answer `/health` and `/metrics`, or an orchestrator that finds it full
/// finds it dead and restarts it, dropping every client it served.
///
/// The server accepts up to ``reserve`` connections past `maximum`; on those (the ones whose
/// opening found `maximum` already open) only `/health` and `/metrics` are answered, anything else
/// `503` with `Retry-After`, and the connection closes. Past that, connections wait to be accepted.
final class ConnectionCapacity: Sendable {
    /// The connections kept past the cap for health probes.
    static let reserve = 8

    let maximum: Int
    private let open = Atomic<Int>(0)

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// Counts a connection opened; whether it is past the cap (probes only).
    func opened() -> Bool {
        open.add(1, ordering: .relaxed).newValue > maximum
    }

    /// Counts a connection closed.
    func closed() {
        open.subtract(1, ordering: .relaxed)
    }

    /// The answer to a request on a connection past the cap: none for a health probe.
    func refusal(target: String) -> HTTPConnectionGuardStateMachine.Refusal? {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if path == "/health" || path == "/metrics" { return nil }
        return HTTPConnectionGuardStateMachine.Refusal(
            status: 503,
            error: TandemError(.unavailable, "The server is serving the most connections it allows (\(maximum)); this connection is closed. Retry in a moment."),
            headers: ["Retry-After": "1"])
    }
}
