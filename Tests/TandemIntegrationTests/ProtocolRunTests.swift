import Foundation
import Synchronization
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// The exactly-once promise, checked from outside over real sockets: in a seeded run, writers that
/// pipeline, meet `unavailable`, lose connections at random points and live through a server
/// restart end with every mutation id applied exactly once or refused with a code, and every
/// listener sees every commit once, in order, and ends with the server's state.
///
/// `TANDEM_PROTOCOL_SEEDS=N` runs N seeds per store instead of the few the suite runs;
/// `TANDEM_PROTOCOL_SEED=S` replays one seed (as a failure names it) against both stores.
@Suite("Seeded protocol runs")
struct ProtocolRunTests {
    static var memorySeeds: [UInt64] { seeds(default: 12, offset: 1_000) }
    static var sqliteSeeds: [UInt64] { seeds(default: 3, offset: 2_000) }

    static func seeds(default count: Int, offset: UInt64) -> [UInt64] {
        if let seed = ProcessInfo.processInfo.environment["TANDEM_PROTOCOL_SEED"].flatMap(UInt64.init) { return [seed] }
        let wanted = ProcessInfo.processInfo.environment["TANDEM_PROTOCOL_SEEDS"].flatMap(Int.init) ?? count
        return (0..<UInt64(wanted)).map { offset + $0 }
    }

    @Test("against MemoryServerStore", arguments: memorySeeds)
    func memory(seed: UInt64) async throws {
        let store = MemoryServerStore(clock: ManualClock())
        try await run(seed: seed) { store }
    }

    @Test("against SQLiteServerStore", arguments: sqliteSeeds)
    func sqlite(seed: UInt64) async throws {
        let directory = TemporaryDirectory()
        try await run(seed: seed) { try SQLiteServerStore(directory: directory.url) }
    }

    /// One run: the store is opened again (over the same data) at each restart.
    func run(seed: UInt64, open: @escaping @Sendable () throws -> any ServerStore) async throws {
        var random = SeededRandomNumberGenerator(seed: seed)
        let counters = (0..<4).map { "counters/c\($0)" }
        var configuration = SyncServerConfiguration()
        // Small enough that pipelined writes meet `unavailable`.
        configuration.limits.maximumPendingWritesPerConnection = 3
        let history = History()
        var store = try open()
        store.observeCommits(history.record)
        _ = try await store.commit(counters.map { .set(try DocumentPath($0), ["n": 0]) })
        var server = try await LiveServer.start(store: store, configuration: configuration)
        let port = server.port
        let gate = ServerGate()
        gate.open(port: port)

        // The writers and their requests: increments of shared counters, some in requests that
        // also update a missing document and so are refused whole. Each connection writes under
        // two writer ids, whose orders are kept apart; a few requests carry writes of both.
        let writers = (0..<Int.random(in: 4...8, using: &random)).map { index -> ProtocolWriter in
            var sequences: [String: UInt64] = [:]
            let lanes = ["w\(index)/a", "w\(index)/b"]
            let requests = (0..<Int.random(in: 20...40, using: &random)).map { _ -> ProtocolWriter.Request in
                var mutations: [Mutation] = []
                var increments: [String: Int] = [:]
                let mixed = Int.random(in: 0..<8, using: &random) == 0
                let lane = lanes.randomElement(using: &random)!
                func nextID() -> MutationID {
                    let writer = mixed ? lanes.randomElement(using: &random)! : lane
                    sequences[writer, default: 0] += 1
                    return MutationID(clientID: writer, sequence: sequences[writer]!)
                }
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    let counter = counters.randomElement(using: &random)!
                    mutations.append(Mutation.update(try! DocumentPath(counter), fields: [:], transforms: [.init("n", .increment(1))])
                        .identified(by: nextID()))
                    increments[counter, default: 0] += 1
                }
                if Int.random(in: 0..<10, using: &random) == 0 {
                    mutations.append(Mutation.update(try! DocumentPath("counters/missing"), fields: ["n": 1])
                        .identified(by: nextID()))
                }
                return ProtocolWriter.Request(mutations: mutations, increments: increments)
            }
            return ProtocolWriter(clientID: "w\(index)", requests: requests, window: Int.random(in: 1...8, using: &random),
                                  dropChance: [0, 0.02, 0.1].randomElement(using: &random)!)
        }
        let total = writers.reduce(0) { $0 + $1.requests.count }
        let answers = ProtocolWriter.Answers()
        let progress = Progress()
        let listeners = (0..<2).map { _ in ProtocolListener(collection: try! CollectionPath("counters")) }
        let restartAt = (0..<Int.random(in: 1...2, using: &random)).map { _ in Int.random(in: 1..<max(2, total), using: &random) }.sorted()

        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, writer) in writers.enumerated() {
                let writerSeed = seed &* 31 &+ UInt64(index)
                group.addTask { await writer.run(gate: gate, answers: answers, progress: progress, seed: writerSeed) }
            }
            for (index, listener) in listeners.enumerated() {
                group.addTask { await listener.run(gate: gate, seed: seed &* 17 &+ UInt64(index), dropChance: 0.05) }
            }
            // Restarts at chosen points of progress: the server goes, its store is reopened, and a
            // new server comes up on the same port.
            for point in restartAt {
                await progress.wait(for: point)
                trace("restart after \(point) answers")
                await server.stop()
                await gate.close()
                let previous = store
                store = try open()
                // A store kept in memory is the same one again: it already tells the history.
                if (store as AnyObject) !== (previous as AnyObject) { store.observeCommits(history.record) }
                do {
                    server = try await LiveServer.start(store: store, port: port, configuration: configuration)
                } catch {
                    // Nothing to run against: the clients stop rather than wait for a server.
                    await gate.shut()
                    throw error
                }
                gate.open(port: port)
                trace("restarted")
            }
            await progress.wait(for: total)
            trace("all \(total) writes answered")
            // The listeners catch up with the last commit, then stop.
            let final = try await store.currentVersion()
            for listener in listeners {
                await listener.wait(for: final)
                await listener.finish()
            }
            group.cancelAll()
        }
        await server.stop()

        // Every mutation id is applied exactly once or refused with a code, and its answers agree.
        #expect(answers.conflicts.withLock { $0 }.isEmpty, "\(answers.conflicts.withLock { $0 })")
        let decided = answers.state.withLock { $0 }
        let applications = history.applications()
        var expected: [String: Int] = [:]
        for writer in writers {
            for request in writer.requests {
                let outcomes = request.mutations.compactMap { decided[$0.id!] }
                #expect(outcomes.count == request.mutations.count, "seed \(seed): \(writer.clientID) has unanswered mutations")
                let applied = outcomes.allSatisfy(\.isApplied)
                #expect(applied || outcomes.allSatisfy { $0.status == .refused && $0.error != nil }, "seed \(seed): a request half applied: \(outcomes)")
                // Only a request that updates the missing document is refused, and for that: a
                // refusal of any other is a write lost, however politely.
                let updatesMissing = request.mutations.contains { $0.path.description == "counters/missing" }
                #expect(applied != updatesMissing, "seed \(seed): \(writer.clientID)'s request \(request.mutations.compactMap(\.id)) answered \(outcomes)")
                if updatesMissing { #expect(outcomes.allSatisfy { $0.error?.code == .notFound }, "seed \(seed): \(outcomes)") }
                // A change names the request's last mutation of its document: the request's
                // commits are the batches naming any of its ids.
                let ids = Set(request.mutations.compactMap(\.id))
                let commits = Set(ids.flatMap { applications[$0] ?? [] })
                #expect(commits.count == (applied ? 1 : 0), "seed \(seed): a request of \(writer.clientID) committed \(commits.sorted()), answered \(outcomes)")
                if applied, let version = commits.first { #expect(outcomes.allSatisfy { $0.version == version }, "seed \(seed): \(outcomes) committed at \(version)") }
                if applied { expected.merge(request.increments, uniquingKeysWith: +) }
            }
        }
        // Each writer id's writes applied in the order of their sequences.
        var byWriter: [String: [(sequence: UInt64, version: Version)]] = [:]
        for (id, versions) in applications {
            for version in versions { byWriter[id.clientID, default: []].append((id.sequence, version)) }
        }
        for (writer, applied) in byWriter {
            let versions = applied.sorted { $0.sequence < $1.sequence }.map(\.version)
            #expect(versions == versions.sorted(), "seed \(seed): \(writer)'s writes applied out of order")
        }
        // The store's counters are the sum of what was applied.
        let reopened = try open()
        for counter in counters {
            #expect(try await reopened.document(at: try DocumentPath(counter))?.data["n"] == .int(expected[counter] ?? 0), "seed \(seed): \(counter)")
        }
        #expect(history.problems.isEmpty, "seed \(seed): \(history.problems)")
        // Each listener saw each commit once, in order, and ends with the server's documents.
        let truth = try await reopened.read(.collection(try CollectionPath("counters"), Query())).documents
        for listener in listeners {
            let state = listener.state.withLock { $0 }
            #expect(state.problems.isEmpty, "seed \(seed): \(state.problems)")
            #expect(state.documents.values.sorted { $0.path < $1.path } == truth, "seed \(seed): the listener's view differs from the server's")
        }
    }
}

/// Every batch the store reported committed, across restarts.
final class History: Sendable {
    private let batches = Mutex<[Version: CommittedBatch]>([:])
    private let duplicates = Mutex<[String]>([])

    var problems: [String] { duplicates.withLock { $0 } }

    func record(_ notice: CommitNotice) {
        batches.withLock { batches in
            for batch in notice.batches {
                if batches[batch.version] != nil { duplicates.withLock { $0.append("version \(batch.version) committed twice") } }
                batches[batch.version] = batch
            }
        }
    }

    /// The versions at which each mutation id's change was committed.
    func applications() -> [MutationID: [Version]] {
        var result: [MutationID: [Version]] = [:]
        for batch in batches.withLock({ $0.values }) {
            for change in batch.changes {
                if let id = change.mutationID { result[id, default: []].append(batch.version) }
            }
        }
        return result
    }
}
