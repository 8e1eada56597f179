import Testing
import TandemTesting

/// Seeds of the simulation that found bugs, each run many times at once: the interleavings they
/// need come often under load and seldom alone (seed 268 broke 72 runs of 100, seed 349 about
/// half, seed 4457 64, before their fixes).
/// - 268: an engine made again while a task held the old one; both wrote one cache, and the view
///   stayed short for good.
/// - 349: pipelined change-sync sends across a reconnection; the later one reached the server
///   first, and the earlier was refused for good as out of order.
/// - 4457: two changes of a record in a batch sent change by change, both refused as conflicts;
///   the older was taken for an atomic refusal's bystander and queued again unsent, and then won
///   over the newer one's resolution (64 runs of 100).
@Suite("Client simulation: seeds that found bugs", .timeLimit(.minutes(10)))
struct ClientSimulationRegressionTests {
    static let seeds: [UInt64] = [268, 349, 4457].flatMap { seed -> [UInt64] in Array(repeating: seed, count: 12) }

    @Test(arguments: Self.seeds)
    func stillHolds(seed: UInt64) async {
        if let failure = await ClientSimulation(steps: 40).run(seed: seed) {
            Issue.record("\(failure)\n\(failure.trace.suffix(400).joined(separator: "\n"))")
        }
    }
}
