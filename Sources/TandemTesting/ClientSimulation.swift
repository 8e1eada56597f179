import Foundation
import Synchronization
import Tandem
import TandemCore
import TandemServer

/// A seeded simulation of an app on one device: a `CollectionSyncEngine`, a `SyncedCollection` and
/// a `ChangeSyncEngine` on a signed-in mock server, driven by calls, sign-ins, network faults and relaunches that are
/// all drawn from one seed, with the promises checked along the way and once everything is quiet.
///
/// Each step draws one thing to do:
/// - the app's calls: writes (an increment of a counter, so a write applied twice or lost shows in
///   the total), edits of the synced handle's notes (each naming the user whose data the handle
///   showed; sometimes with a switch to the other user right after), changes sent through the
///   change-sync engine, listeners started and stopped (at once after a start, too), engines
///   stopped and started;
/// - the user: switching to another (sometimes there and back at once), signing out;
/// - the network: going offline and back, an acknowledgement lost with the connection, a request
///   refused as unavailable, latency;
/// - a relaunch: the engines and the handle dropped and made again from their files;
/// - a quiet point, where the checks below run.
///
/// After every step: the engine shows one user's documents only, and runs no listener when the
/// app's last call was a stop (a stop made right after a start included).
///
/// At a quiet point (and at the end, for every user) the device goes online as one user and waits
/// for the engines and the synced handle to settle, then checks: every write the app was told was
/// queued is applied on the server exactly once, in that user's data (no increment lost or
/// doubled); no write was refused; the engine shows exactly the server's documents; the synced handle shows exactly the
/// user's notes on the server, each written as that user's (an edit made as the user switched is in
/// the first user's data or refused, never the other's) and holding the text last written to it;
/// each engine has one listener on the server; every change sent is in the user's zone as last
/// sent, and no other user's record is.
/// A wait that never ends is a failure too (nothing can advance), after a deadline.
///
/// The steps taken are the seed's: `TANDEM_SIM_SEED` replays one. Threads still interleave as they
/// do in an app, so a failure that depends on a rare interleaving may need its seed run a few
/// times.
///
/// ```swift
/// let simulation = ClientSimulation(steps: 40)
/// if let failure = await simulation.run(seed: 7) { Issue.record("\(failure)") }
/// ```
public struct ClientSimulation: Sendable {
    /// A broken promise: the seed and step it showed at, what was wrong, and the steps taken.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        /// The seed that replays it (`TANDEM_SIM_SEED`).
        public let seed: UInt64
        /// The step it showed at (the last step and past it: the final checks).
        public let step: Int
        /// What was wrong.
        public let message: String
        /// Each step taken, in order.
        public let trace: [String]

        public var description: String {
            "seed \(seed), step \(step): \(message) Replay it with TANDEM_SIM_SEED=\(seed) (TANDEM_SIM_TRACE=1 prints each step)."
        }
    }

    /// Steps per run.
    public var steps: Int
    /// Whether each step is printed as it is taken.
    public var printsTrace: Bool
    /// How long a quiet point may wait for the engines to settle before it counts as a hang.
    public var settleDeadline: Duration

    /// A simulation of `steps` steps a run.
    public init(steps: Int = 40, printsTrace: Bool = false, settleDeadline: Duration = .seconds(20)) {
        self.steps = steps
        self.printsTrace = printsTrace
        self.settleDeadline = settleDeadline
    }

    /// Runs the steps `seed` draws; nil when every promise held.
    public func run(seed: UInt64) async -> Failure? {
        let world: SimulationWorld
        do {
            world = try await SimulationWorld(seed: seed, printsTrace: printsTrace, deadline: settleDeadline)
        } catch {
            return Failure(seed: seed, step: 0, message: "The simulation could not start: \(error)", trace: [])
        }
        defer { world.close() }
        for step in 1...max(1, steps) {
            world.step = step
            if let message = await world.takeStep() {
                world.log("broken: \(message)")
                return Failure(seed: seed, step: step, message: message, trace: world.trace)
            }
        }
        world.step = steps + 1
        for user in SimulationWorld.users {
            if let message = await world.quiet(as: user) {
                world.log("broken: \(message)")
                return Failure(seed: seed, step: steps + 1, message: message, trace: world.trace)
            }
        }
        if let message = world.checkTotals() {
            world.log("broken: \(message)")
            return Failure(seed: seed, step: steps + 1, message: message, trace: world.trace)
        }
        return nil
    }

    /// The seeds a test runs: `TANDEM_SIM_SEED` alone when it is set (`TANDEM_SIM_REPEAT` times),
    /// else `TANDEM_SIM_SEEDS`
    /// seeds (or `defaultCount`) from `TANDEM_SIM_FIRST_SEED` (or 1).
    public static func seeds(defaultCount: Int) -> [UInt64] {
        let environment = ProcessInfo.processInfo.environment
        if let seed = environment["TANDEM_SIM_SEED"].flatMap(UInt64.init) {
            // Run again and again at once, a failure that needs a rare interleaving shows sooner.
            return Array(repeating: seed, count: max(1, environment["TANDEM_SIM_REPEAT"].flatMap(Int.init) ?? 1))
        }
        let count = UInt64(max(1, environment["TANDEM_SIM_SEEDS"].flatMap(Int.init) ?? defaultCount))
        let first = environment["TANDEM_SIM_FIRST_SEED"].flatMap(UInt64.init) ?? 1
        return (first..<first + count).map { $0 }
    }

    /// Whether `TANDEM_SIM_TRACE` asks for each step to be printed.
    public static var tracing: Bool { ProcessInfo.processInfo.environment["TANDEM_SIM_TRACE"] == "1" }
}

/// A note of the simulation's synced handle, with the user whose data it was written to.
struct SimulationNote: DocumentIdentifiable {
    var clientId = UUID()
    var documentId: String?
    var owner: String
    var text: String
}

/// A counter document of the simulation: an increment per write.
struct SimulationCounter: SyncModel, Equatable {
    var id: String
    var owner: String
    var n: Int
}
