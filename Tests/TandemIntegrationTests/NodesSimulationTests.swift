#if os(Linux)
import Foundation
import Synchronization
import Testing
import TandemCore
import TandemTesting

/// A seeded run of several `tandem serve --postgres` nodes on one private PostgreSQL, with every
/// fault a deployment meets: writers pipelining writes of every kind through every node, listeners
/// with and without filters on every node, nodes killed and stopped, PostgreSQL crashed
/// (`-m immediate`) and started again. Afterwards it checks, against the history PostgreSQL
/// itself recorded (a trigger copies every row of the commit log as it is written):
///
/// - every listener batch shows exactly the true state of its target at the batch's version,
///   and a listener's versions never go back (so no commit was skipped without its effect shown);
/// - every acknowledged write is in the history at the version it was acknowledged with, with
///   the document it was answered with, and no mutation id was applied at two versions;
/// - the increments acknowledged add up to the counter's value;
/// - every write was answered (an answer, or its connection closing) within a bound;
/// - every node stopped with SIGTERM exited within its grace period's bound, database up or down.
///
/// CI runs a fixed set of seeds; `TANDEM_NODES_SEEDS=N` runs seeds 1…N, `TANDEM_NODES_SEED=S`
/// replays one. A failing seed prints the command that replays it.
@Suite("PostgreSQL nodes, seeded", .postgresCluster, .serialized, .timeLimit(.minutes(60)),
       .enabled(if: PostgresClusterTrait.runs, Comment(rawValue: PostgresCluster.unavailableReason ?? "")))
struct NodesSimulationTests {
    static let seeds: [UInt64] = {
        let environment = ProcessInfo.processInfo.environment
        if let one = environment["TANDEM_NODES_SEED"].flatMap(UInt64.init) { return [one] }
        if let count = environment["TANDEM_NODES_SEEDS"].flatMap(UInt64.init), count > 0 { return Array(1...count) }
        return [1, 2, 3]
    }()

    @Test("seeded nodes under node kills and database crashes: every listener batch equals the true state at its version, every acknowledged write is applied once, every write is answered, every node obeys SIGTERM",
          arguments: seeds)
    func seeded(seed: UInt64) async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        let run = NodesRun(seed: seed, cluster: cluster, url: url)
        let failures = try await run.run()
        if !failures.isEmpty {
            print("seed \(seed) failed; replay it with: TANDEM_NODES_SEED=\(seed) swift test --filter NodesSimulationTests")
            print("seed \(seed) events:\n" + run.events.withLock { $0.joined(separator: "\n") })
        }
        for failure in failures.prefix(20) {
            Issue.record("seed \(seed): \(failure)")
        }
    }
}

/// One seed's run.
final class NodesRun: Sendable {
    let seed: UInt64
    let cluster: PostgresCluster
    let url: String
    let database: String
    let nodes: NodeSet
    /// This run's name, in the `meta/run` document of its database.
    let runID = UUID().uuidString
    /// What the nodes said about reloading their listeners.
    let nodeEvents: Locked<[String]>
    let failures = Mutex<[String]>([])
    let events = Mutex<[String]>([])
    /// Writes answered (acknowledged or refused), for the fault schedule's pacing.
    let progress = WriteProgress()
    /// Every acknowledgement: the id, the version, the path and the document it was answered with.
    let acknowledged = Mutex<[(id: MutationID, version: Version, path: String, data: JSONObject?)]>([])
    /// Increments acknowledged as applied.
    let increments = Atomic<Int>(0)
    /// The longest a write waited for its answer (or its connection's end), in milliseconds.
    let longestAnswer = Atomic<Int>(0)
    /// Each listener target's complete batches: (listener, target, version, view).
    let observations = Mutex<[(listener: String, target: Int, version: Version, view: [String: JSONObject])]>([])

    /// Two nodes, or three on seeds divisible by three.
    var nodeCount: Int { seed % 3 == 0 ? 3 : 2 }
    static let writerCount = 3
    static let listenerTargets: [Int: ListenTarget] = [
        1: .collection(collectionPath("c"), Query()),
        2: .collection(collectionPath("c"), Query().whereField("k", isGreaterThanOrEqualTo: 2)),
        3: .document(documentPath("c/d0")),
        4: .collectionGroup("c", Query().whereField("k", isLessThan: 2)),
    ]
    /// How long a write may wait for its answer: a statement's deadline (5 s here), a wait for a
    /// connection, and a loaded machine's slack.
    static let answerBound = Duration.seconds(40)
    /// How long a node may take to exit after SIGTERM: three times its grace (5 s here), with slack.
    static let shutdownBound = Duration.seconds(20)

    init(seed: UInt64, cluster: PostgresCluster, url: String) {
        self.seed = seed
        self.cluster = cluster
        self.url = url
        database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let events = Locked<[String]>([])
        nodes = NodeSet(url: url, count: seed % 3 == 0 ? 3 : 2) { index, line in
            if line.contains("load again") { events.withLock { $0.append("node \(index): \(line)") } }
        }
        nodeEvents = events
    }

    func fail(_ message: String) {
        failures.withLock { $0.append(message) }
        note("FAIL " + message)
    }

    func note(_ event: String) {
        if ProcessInfo.processInfo.environment["TANDEM_NODES_VERBOSE"] != nil { FileHandle.standardError.write(Data("[\(seed)] \(event)\n".utf8)) }
        events.withLock { $0.append(event) }
    }

    func run() async throws -> [String] {
        // The first node creates the schema; the history trigger goes on before anything is written.
        try await nodes.start(0)
        try await cluster.psql("""
            CREATE TABLE audit (version bigint, path text, data text, mutation_client text, mutation_sequence bigint);
            CREATE FUNCTION audit_changes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO audit VALUES (NEW.version, NEW.path, NEW.data, NEW.mutation_client, NEW.mutation_sequence);
                RETURN NEW;
            END $$;
            CREATE TRIGGER audit AFTER INSERT ON tandem_changes FOR EACH ROW EXECUTE FUNCTION audit_changes();
            """, database: database)
        // What tells this run's nodes from any other server that may have taken a port one of them
        // had (other suites start servers on free ports too): a document only this database holds.
        try await cluster.psql("""
            INSERT INTO tandem_documents (path, collection, collection_group, version, create_time, update_time, data, body)
            VALUES ('meta/run', 'meta', 'meta', 0, 0, 0, '{"run":"\(runID)"}', '{"run":"\(runID)"}');
            """, database: database)
        for index in 1..<nodeCount { try await nodes.start(index) }
        var random = SeededRandomNumberGenerator(seed: seed)
        let writesPerWriter = Int.random(in: 30...60, using: &random)
        // Freezing a node (SIGSTOP) runs only where asked for: since it came into the suite, the
        // test process has crashed inside Foundation's Process.run() (starting other children)
        // in three full runs out of four, and in none before it.
        let kinds = ProcessInfo.processInfo.environment["TANDEM_NODES_PAUSE"] != nil ? 6 : 5
        let faults = (0..<Int.random(in: 2...4, using: &random)).map { _ in Int.random(in: 0..<kinds, using: &random) }
        let writerSeeds = (0..<Self.writerCount).map { _ in UInt64.random(in: 0...UInt64.max, using: &random) }
        let faultSeed = UInt64.random(in: 0...UInt64.max, using: &random)
        note("seed \(seed): \(writesPerWriter) writes per writer, faults \(faults)")
        let stopListening = Locked(false)
        let fence = Locked<Version?>(nil)
        let (fenced, fenceReached) = AsyncStream.makeStream(of: Void.self)
        try await withThrowingTaskGroup(of: Void.self) { group in
            let listeners = (0..<nodeCount).map { index in Listener(run: self, name: "l\(index)", preferred: index) }
            for listener in listeners {
                group.addTask { await listener.run(until: { stopListening.withLock { $0 } }, fence: { fence.withLock { $0 } }, reached: { fenceReached.yield() }) }
            }
            // The writers and the faults; then a fence every target sees, which each listener
            // must reach. Should any of it throw (a node that does not start again), the
            // listeners stop too, so the run ends with the error instead of waiting on them.
            let version: Version
            do {
                try await withThrowingTaskGroup(of: Void.self) { work in
                    work.addTask {
                        await withTaskGroup(of: Void.self) { writers in
                            for (index, seed) in writerSeeds.enumerated() {
                                writers.addTask { await Writer(run: self, name: "w\(index)", seed: seed).run(writes: writesPerWriter) }
                            }
                        }
                        self.progress.finish()
                    }
                    work.addTask { try await self.inject(faults, seed: faultSeed, total: writesPerWriter * Self.writerCount) }
                    try await work.waitForAll()
                }
                version = try await fenceWrite()
            } catch {
                stopListening.withLock { $0 = true }
                for listener in listeners { await listener.close() }
                throw error
            }
            note("fence at \(version)")
            fence.withLock { $0 = version }
            // Each listener says when all its targets have reached the fence; one that never does
            // stopped silently, which the bound below reports.
            let reached = await firstOf(seconds: 120) {
                var count = 0
                for await _ in fenced {
                    count += 1
                    if count == listeners.count { return }
                }
            }
            if !reached { fail("a listener did not reach the fence at \(version) within 120 s: it stopped hearing commits") }
            stopListening.withLock { $0 = true }
            for listener in listeners { await listener.close() }
            try await group.waitForAll()
        }
        try await check()
        // Every node obeys SIGTERM.
        for index in 0..<nodeCount { await terminate(index, restart: false) }
        return failures.withLock { $0 }
    }

    /// Says hello on `stream` and checks the node serves this run's database (the `meta/run`
    /// document names it); false otherwise, or when the node did not answer.
    func hello(_ stream: RawStream, _ clientID: String) async -> Bool {
        // Within the bound: a node that dies while the connection opens can leave it half closed,
        // which the client would wait on for good.
        stream.send(.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: nil))
        guard case .welcome?? = await nextMessage(of: stream, within: Self.answerBound) else { return false }
        stream.send(.get(id: 999_999, path: documentPath("meta/run")))
        while let next = await nextMessage(of: stream, within: Self.answerBound), let message = next {
            switch message {
            case .heartbeat:
                stream.send(.heartbeat)
            case .documents(999_999, let documents, _):
                if case .string(runID)? = documents.first?.data["run"] { return true }
                note("\(clientID): a server that is not this run's took a port of one of its nodes")
                return false
            case .error(999_999?, _):
                return false
            default:
                continue
            }
        }
        return false
    }

    /// Runs `body`, giving up after `seconds`; whether it finished.
    func firstOf(seconds: Int, _ body: @escaping @Sendable () async -> Void) async -> Bool {
        await race(body, within: .seconds(seconds))
    }

    /// The faults, each after some more writes were answered.
    func inject(_ faults: [Int], seed: UInt64, total: Int) async throws {
        var random = SeededRandomNumberGenerator(seed: seed)
        var target = 0
        for fault in faults {
            target += Int.random(in: total / (faults.count + 3)...total / (faults.count + 1), using: &random)
            guard await progress.wait(for: target) else { return }
            let node = Int.random(in: 0..<nodeCount, using: &random)
            switch fault {
            case 0:
                note("kill node \(node)")
                await nodes.kill(node)
                try await nodes.start(node)
            case 1:
                note("terminate node \(node)")
                await terminate(node, restart: true)
            case 2, 3:
                note("crash the database")
                await cluster.crash()
                // Down while some writes fail, and for up to six seconds more, then back.
                _ = await progress.waitForFailures(2, seconds: 3)
                let down = Int.random(in: 0...6_000, using: &random)
                note("the database stays down \(down) ms more")
                try await Task.sleep(for: .milliseconds(down))  // the fault's length, part of the schedule
                if fault == 3 {
                    note("terminate node \(node) while the database is down")
                    await terminate(node, restart: false)
                }
                try await cluster.restart()
                note("database back")
                if fault == 3 { try await nodes.start(node) }
            case 5:
                // Frozen (a long pause, a partition) past the node timeout (2 s here): the others
                // trim the commit log it has not read, and when it runs again its listeners load
                // again from where they were.
                let pause = Int.random(in: 3_000...6_000, using: &random)
                note("pause node \(node) for \(pause) ms")
                nodes.signal(node, SIGSTOP)
                let start = ContinuousClock.now
                // Commits it cannot read meanwhile, through another node.
                await writeThroughAnother(than: node, tag: "pause-\(pause)")
                try await Task.sleep(until: start + .milliseconds(pause))  // the fault's length, part of the schedule
                nodes.signal(node, SIGCONT)
            default:
                note("kill node \(node) and crash the database")
                await nodes.kill(node)
                await cluster.crash()
                try await cluster.restart()
                try await nodes.start(node)
            }
        }
    }

    /// Stops a node with SIGTERM and checks it exits within the bound; starts it again if asked.
    func terminate(_ index: Int, restart: Bool) async {
        let clock = ContinuousClock()
        let start = clock.now
        let status = await nodes.terminate(index, within: Self.shutdownBound)
        let took = clock.now - start
        note("node \(index) exited after SIGTERM in \(took) with status \(status.map(String.init) ?? "none")")
        if status == nil { fail("node \(index) did not exit within \(Self.shutdownBound) of SIGTERM") }
        if let status, status != 0 { fail("node \(index) exited with status \(status) after SIGTERM, not 0") }
        if restart {
            do {
                try await nodes.start(index)
            } catch {
                fail("node \(index) did not start again: \(error)")
            }
        }
    }

    /// A few writes through a node other than `node`, each alone, once.
    func writeThroughAnother(than node: Int, tag: String) async {
        guard let port = nodes.livePorts().first(where: { $0 != nodes.port(node) }) else { return }
        let stream = RawStream(port: port)
        defer { Task { await stream.close() } }
        guard await hello(stream, tag) else { return }
        stream.send(.writeEach(id: 1, mutations: (1...3).map { n in
            Mutation(path: documentPath("c/d\(n)"), kind: .set(["k": .int(n), "by": .string(tag)]), id: MutationID(clientID: tag, sequence: UInt64(n)))
        }))
        if case .ack(_, let answers)?? = await nextMessage(of: stream, within: .seconds(20)) {
            note("\(tag): wrote through port \(port) at \(answers.map(\.version.rawValue))")
        }
    }

    /// One atomic write that every listener target sees: c/d0 (k 0: the document, the collection,
    /// the group with k < 2) and c/zfence (k 9: the collection, the filter k >= 2).
    func fenceWrite() async throws -> Version {
        for attempt in 0..<100 {
            guard let port = nodes.livePorts().first else { throw ClusterError(message: "no node is running") }
            let stream = RawStream(port: port)
            defer { Task { await stream.close() } }
            guard await hello(stream, "fence") else { continue }
            stream.send(.write(id: 1, mutations: [
                Mutation(path: documentPath("c/d0"), kind: .set(["k": 0, "by": "fence"]), id: MutationID(clientID: "fence", sequence: UInt64(attempt + 1))),
                Mutation(path: documentPath("c/zfence"), kind: .set(["k": 9]), id: MutationID(clientID: "fence", sequence: UInt64(attempt + 1001))),
            ]))
            while let next = await nextMessage(of: stream, within: Self.answerBound), let message = next {
                if case .ack(_, let acknowledgements) = message { return acknowledgements[0].version }
                guard case .heartbeat = message else { break }
                stream.send(.heartbeat)
            }
            try await Task.sleep(for: .milliseconds(100))  // a retry's backoff
        }
        throw ClusterError(message: "the fence write was never acknowledged")
    }

    /// The checks against PostgreSQL's own record of every commit.
    func check() async throws {
        let rows = try await cluster.psql(
            "SELECT version, path, coalesce(data, ''), coalesce(mutation_client, ''), coalesce(mutation_sequence, -1) FROM audit ORDER BY version, path",
            database: database)
        struct Row { var version: Version; var path: String; var data: JSONObject?; var writer: MutationID? }
        var history: [Row] = []
        for line in rows.split(separator: "\n") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
            guard cells.count == 5, let version = UInt64(cells[0]), let sequence = Int64(cells[4]) else { fail("unreadable history row: \(line)"); continue }
            var data: JSONObject?
            if !cells[2].isEmpty {
                guard case .object(let object)? = try? JSONText.parse(cells[2]) else { fail("history row with data that is not an object: \(line)"); continue }
                data = object
            }
            history.append(Row(version: Version(version), path: cells[1], data: data,
                               writer: cells[3].isEmpty ? nil : MutationID(clientID: cells[3], sequence: UInt64(sequence))))
        }
        note("history: \(history.count) rows, through \(history.last?.version ?? .zero)")
        // Each mutation id applied at one version only.
        var appliedAt: [MutationID: Set<Version>] = [:]
        for row in history { if let writer = row.writer { appliedAt[writer, default: []].insert(row.version) } }
        for (id, versions) in appliedAt where versions.count > 1 {
            fail("mutation \(id.clientID)#\(id.sequence) was applied at \(versions.count) versions: \(versions.sorted())")
        }
        // Every acknowledgement is in the history as it was answered.
        var byVersionPath: [String: Row] = [:]
        for row in history { byVersionPath["\(row.version.rawValue) \(row.path)"] = row }
        for answer in acknowledged.withLock({ $0 }) {
            guard let row = byVersionPath["\(answer.version.rawValue) \(answer.path)"] else {
                // A write that changed nothing (a delete of a missing document) writes no row.
                if answer.data == nil { continue }
                fail("acknowledged \(answer.id.clientID)#\(answer.id.sequence) at \(answer.version) on \(answer.path) is not in the history")
                continue
            }
            if row.data != answer.data {
                fail("acknowledged \(answer.id.clientID)#\(answer.id.sequence) at \(answer.version) on \(answer.path) answered \(String(describing: answer.data)), the history has \(String(describing: row.data))")
            }
        }
        // The increments add up.
        var state: [String: JSONObject] = [:]
        for row in history { state[row.path] = row.data }
        let counter: Int = if case .int(let n)? = state["c/counter"]?["n"] { Int(n) } else { 0 }
        if counter != increments.load(ordering: .relaxed) {
            fail("the counter is \(counter), but \(increments.load(ordering: .relaxed)) increments were acknowledged")
        }
        // The documents table ends as the history does.
        let table = try await cluster.psql("SELECT path, data FROM tandem_documents WHERE data IS NOT NULL AND path <> 'meta/run' ORDER BY path", database: database)
        var stored: [String: JSONObject] = [:]
        for line in table.split(separator: "\n") {
            let cells = line.split(separator: "|", maxSplits: 1).map(String.init)
            if cells.count == 2, case .object(let object)? = try? JSONText.parse(cells[1]) { stored[cells[0]] = object }
        }
        if stored != state.compactMapValues({ $0 }) { fail("the documents table differs from the history's last state") }
        // Every listener batch shows the true state at its version.
        let observed = observations.withLock { $0 }.sorted { $0.version < $1.version }
        var current: [String: JSONObject] = [:]
        var next = 0
        for observation in observed {
            while next < history.count, history[next].version <= observation.version {
                current[history[next].path] = history[next].data
                next += 1
            }
            let expected = Self.view(of: observation.target, in: current)
            if observation.view != expected {
                let missing = expected.filter { observation.view[$0.key] != $0.value }.keys.sorted()
                let extra = observation.view.filter { expected[$0.key] != $0.value }.keys.sorted()
                fail("\(observation.listener) target \(observation.target) at \(observation.version): differs from the true state (wrong or missing: \(missing); wrong or extra: \(extra))")
            }
        }
        for event in nodeEvents.withLock({ $0 }) { note(event) }
        note("checked \(observed.count) batches, \(acknowledged.withLock { $0.count }) acknowledgements, longest answer \(longestAnswer.load(ordering: .relaxed)) ms")
        if longestAnswer.load(ordering: .relaxed) > Int(Self.answerBound.components.seconds) * 1000 {
            fail("a write waited \(longestAnswer.load(ordering: .relaxed)) ms for its answer, more than \(Self.answerBound)")
        }
    }

    /// What a target holds of `state`.
    static func view(of target: Int, in state: [String: JSONObject]) -> [String: JSONObject] {
        var view: [String: JSONObject] = [:]
        for (path, data) in state {
            let k: Int? = if case .int(let n)? = data["k"] { Int(n) } else { nil }
            let included = switch target {
            case 1: true
            case 2: k.map { $0 >= 2 } ?? false
            case 3: path == "c/d0"
            default: k.map { $0 < 2 } ?? false
            }
            if included { view[path] = data }
        }
        return view
    }
}

/// The stream's next message (nil inside when it closed), or nil when none came within `bound`.
func nextMessage(of stream: RawStream, within bound: Duration) async -> ServerMessage?? {
    let answer = Ticket<ServerMessage??>()
    let reader = Task { answer.fulfill(.success(.some(await stream.next(heartbeats: true)))) }
    let timer = Task {
        try await Task.sleep(for: bound)
        answer.fulfill(.success(nil))
    }
    defer { timer.cancel() }
    _ = reader
    return (try? await answer.value()) ?? nil
}

/// Whether `body` finished within `bound`; one that did not is left to finish by itself (it need
/// not answer cancellation, as a wait for a process does not).
func race(_ body: @escaping @Sendable () async -> Void, within bound: Duration) async -> Bool {
    let (stream, continuation) = AsyncStream.makeStream(of: Bool.self)
    let work = Task {
        await body()
        continuation.yield(true)
    }
    let timer = Task {
        try await Task.sleep(for: bound)
        continuation.yield(false)
    }
    defer { timer.cancel() }
    _ = work
    for await finished in stream { return finished }
    return false
}

/// Counts answered writes and failures, and lets the fault schedule wait for a count.
final class WriteProgress: Sendable {
    private struct State {
        var answered = 0
        var failures = 0
        var finished = false
        var waiters: [(count: Int, failures: Bool, continuation: CheckedContinuation<Bool, Never>)] = []
    }
    private let state = Mutex(State())

    func answered() { bump { $0.answered += 1 } }
    func failed() { bump { $0.failures += 1 } }
    /// No more writes come: waiters for more are told so.
    func finish() { bump { $0.finished = true } }

    private func bump(_ change: (inout State) -> Void) {
        let ready = state.withLock { state -> [(CheckedContinuation<Bool, Never>, Bool)] in
            change(&state)
            var ready: [(CheckedContinuation<Bool, Never>, Bool)] = []
            state.waiters.removeAll { waiter in
                let value = waiter.failures ? state.failures : state.answered
                if value >= waiter.count { ready.append((waiter.continuation, true)); return true }
                if state.finished { ready.append((waiter.continuation, false)); return true }
                return false
            }
            return ready
        }
        for (continuation, value) in ready { continuation.resume(returning: value) }
    }

    /// Waits until `count` writes were answered; false if the writers finished first.
    func wait(for count: Int) async -> Bool {
        await reach(count, failures: false)
    }

    /// Waits until `more` more failures were seen, or `seconds` passed.
    func waitForFailures(_ more: Int, seconds: Int) async -> Bool {
        let target = state.withLock { $0.failures } + more
        let answer = Ticket<Bool>()
        Task { answer.fulfill(.success(await self.reach(target, failures: true))) }
        let timer = Task {
            try await Task.sleep(for: .seconds(seconds))
            answer.fulfill(.success(false))
        }
        defer { timer.cancel() }
        return (try? await answer.value()) ?? false
    }

    /// Waits until the answered writes (or the failures) reach `count`; false if the writers
    /// finished first.
    private func reach(_ count: Int, failures: Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let ready: Bool? = state.withLock { state in
                if (failures ? state.failures : state.answered) >= count { return true }
                if state.finished { return false }
                state.waiters.append((count, failures, continuation))
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// The nodes: `tandem serve --postgres` processes on one database, each started again on a new
/// port after it stops.
final class NodeSet: Sendable {
    let url: String
    private let processes: Mutex<[(process: RunningProcess, port: Int)?]>

    /// Told each line a node prints after it listens (its errors), with the node's index.
    let output: @Sendable (Int, String) -> Void

    init(url: String, count: Int, output: @escaping @Sendable (Int, String) -> Void = { _, _ in }) {
        self.url = url
        self.output = output
        processes = Mutex(Array(repeating: nil, count: count))
    }

    func start(_ index: Int) async throws {
        let process = try RunningProcess(["serve", "--port", "0", "--postgres", url, "--statement-timeout", "5", "--shutdown-grace", "5",
                                          "--node-timeout", "2",
                                          "--log-level", "error"], errorsToo: true)
        while let line = await process.nextLine() {
            if line.hasPrefix("listening on "), let port = line.split(separator: ":").last.flatMap({ Int($0) }) {
                processes.withLock { $0[index] = (process, port) }
                // Its output is read on, so it never blocks on a full pipe.
                let output = self.output
                Task { while let line = await process.nextLine() { output(index, line) } }
                return
            }
        }
        throw ClusterError(message: "node \(index) exited before it listened")
    }

    func signal(_ index: Int, _ signal: Int32) {
        processes.withLock { $0[index] }?.process.signal(signal)
    }

    func livePorts() -> [Int] {
        processes.withLock { $0.compactMap { $0?.port } }
    }

    func port(_ index: Int) -> Int? {
        processes.withLock { $0[index]?.port }
    }

    func kill(_ index: Int) async {
        guard let running = processes.withLock({ processes in defer { processes[index] = nil }; return processes[index] }) else { return }
        running.process.signal(SIGKILL)
        _ = await running.process.waitForExit()
    }

    /// Sends SIGTERM; the node's exit status, nil when it did not exit within `bound` (then it
    /// is killed).
    func terminate(_ index: Int, within bound: Duration) async -> Int32? {
        guard let running = processes.withLock({ processes in defer { processes[index] = nil }; return processes[index] }) else { return 0 }
        running.process.signal(SIGTERM)
        guard await race({ _ = await running.process.waitForExit() }, within: bound) else {
            running.process.signal(SIGKILL)
            _ = await running.process.waitForExit()
            return nil
        }
        return await running.process.waitForExit()
    }
}

/// A client pipelining writes of every kind, with ids, through whichever node runs: what was not
/// answered when a connection ended is sent again, with the same ids, on the next.
struct Writer: Sendable {
    let run: NodesRun
    let name: String
    let seed: UInt64

    enum Kind { case single, atomic, each, increment, guarded, delete }

    struct Pending {
        var mutations: [Mutation]
        var kind: Kind
        var sentAt: ContinuousClock.Instant?
    }

    func run(writes: Int) async {
        var random = SeededRandomNumberGenerator(seed: seed)
        var sequence: UInt64 = 0
        var pending: [Int: Pending] = [:]
        var made = 0
        var attempt = 0
        var connections = 0
        let clock = ContinuousClock()
        func document() -> DocumentPath { documentPath("c/d\(Int.random(in: 0..<6, using: &random))") }
        func id() -> MutationID {
            sequence += 1
            return MutationID(clientID: name, sequence: sequence)
        }
        func make() -> Pending {
            let kind: Kind = [.single, .single, .single, .atomic, .each, .increment, .guarded, .delete][Int.random(in: 0..<8, using: &random)]
            func set() -> Mutation {
                Mutation(path: document(), kind: .set(["k": .int(Int.random(in: 0...4, using: &random)), "by": .string("\(name)-\(sequence + 1)")]), id: id())
            }
            switch kind {
            case .single: return Pending(mutations: [set()], kind: kind)
            case .atomic, .each:
                let first = set()
                var second = set()
                while second.path == first.path { second.path = document() }
                return Pending(mutations: [first, second], kind: kind)
            case .increment:
                return Pending(mutations: [Mutation(path: documentPath("c/counter"), kind: .merge([:], fields: nil), transforms: [.init("n", .increment(1))], id: id())], kind: kind)
            case .guarded:
                return Pending(mutations: [Mutation(path: document(), kind: .update([.init("k", .int(Int.random(in: 0...4, using: &random)))]),
                                                    precondition: .exists(true), id: id())], kind: kind)
            case .delete:
                return Pending(mutations: [Mutation(path: document(), kind: .delete, id: id())], kind: kind)
            }
        }
        let giveUp = clock.now + .seconds(600)
        while made < writes || !pending.isEmpty {
            if clock.now > giveUp {
                run.fail("\(name): \(pending.count) write(s) still unanswered after ten minutes of trying")
                return
            }
            guard let port = run.nodes.livePorts().randomElement(using: &random) else {
                try? await Task.sleep(for: .milliseconds(50))  // a client's backoff while no node runs
                continue
            }
            connections += 1
            let stream = RawStream(port: port)
            guard await run.hello(stream, name) else {
                await stream.close()
                attempt += 1
                try? await Task.sleep(for: .milliseconds(min(1000, 20 * attempt)))  // a client's backoff
                continue
            }
            func send(_ key: Int) {
                pending[key]!.sentAt = clock.now
                let write = pending[key]!
                stream.send(write.kind == .each ? .writeEach(id: key, mutations: write.mutations) : .write(id: key, mutations: write.mutations))
            }
            for key in pending.keys.sorted() { send(key) }
            run.note("\(name): connected to \(port), \(made) made, \(pending.count) pending")
            var again = false
            while !again && (made < writes || !pending.isEmpty) {
                while pending.count < 4 && made < writes {
                    made += 1
                    pending[made] = make()
                    send(made)
                }
                // A node that answers none of the writes it holds within the bound breaks the
                // promise: reported, and the writes go again elsewhere.
                guard let next = await nextMessage(of: stream, within: NodesRun.answerBound) else {
                    run.fail("\(name): no answer to \(pending.count) write(s) from the node on port \(port) within \(NodesRun.answerBound)")
                    break
                }
                guard let message = next else { break }
                switch message {
                case .heartbeat:
                    stream.send(.heartbeat)
                case .ack(let key, let answers):
                    guard let write = pending.removeValue(forKey: key) else { run.fail("\(name): an answer to write \(key), which it did not wait for"); continue }
                    noteAnswer(write, clock: clock)
                    run.progress.answered()
                    attempt = 0
                    for (mutation, answer) in zip(write.mutations, answers) {
                        switch answer.status {
                        case .applied, .replayed:
                            run.acknowledged.withLock { $0.append((mutation.id!, answer.version, mutation.path.description, answer.document?.data)) }
                            if write.kind == .increment { run.increments.add(1, ordering: .relaxed) }
                        case .refused:
                            if write.kind != .guarded && write.kind != .delete {
                                run.fail("\(name): write \(key) (\(write.kind)) refused: \(answer.error.map { "\($0.code): \($0.message)" } ?? "")")
                            }
                        default:
                            break
                        }
                    }
                case .error(let key?, let error):
                    guard let write = pending[key] else { continue }
                    noteAnswer(write, clock: clock)
                    run.note("\(name): write \(key): \(error.code): \(error.message)")
                    if [.unavailable, .cancelled, .deadlineExceeded, .resourceExhausted, .aborted].contains(error.code) {
                        // Sent again on a new connection, after a client's backoff.
                        run.progress.failed()
                        again = true
                    } else if (write.kind == .guarded && (error.code == .notFound || error.code == .failedPrecondition)) {
                        pending[key] = nil
                        run.progress.answered()
                    } else {
                        pending[key] = nil
                        run.progress.answered()
                        run.fail("\(name): write \(key) (\(write.kind)) failed: \(error.code): \(error.message)")
                    }
                default:
                    break
                }
            }
            // The connection ended (or a write must go again): what it did not answer goes again.
            for write in pending.values { noteAnswer(write, clock: clock) }
            await stream.close()
            if again {
                attempt += 1
                try? await Task.sleep(for: .milliseconds(min(1000, 20 * attempt)))  // a client's backoff
            }
        }
        run.note("\(name): \(made) writes over \(connections) connections")
    }

    func noteAnswer(_ write: Pending, clock: ContinuousClock) {
        guard let sentAt = write.sentAt else { return }
        let waited = clock.now - sentAt
        let milliseconds = Int(waited.components.seconds) * 1000 + Int(waited.components.attoseconds / 1_000_000_000_000_000)
        var current = run.longestAnswer.load(ordering: .relaxed)
        while milliseconds > current {
            let (exchanged, original) = run.longestAnswer.compareExchange(expected: current, desired: milliseconds, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
    }
}

/// A client listening to every target through one node (another when it stops), resuming each
/// from the version it reached; it records each complete batch's view.
final class Listener: Sendable {
    let run: NodesRun
    let name: String
    let preferred: Int
    private let stream = Mutex<RawStream?>(nil)

    init(run: NodesRun, name: String, preferred: Int) {
        self.run = run
        self.name = name
        self.preferred = preferred
    }

    func close() async {
        if let stream = stream.withLock({ $0 }) { await stream.close() }
    }

    func run(until stopped: @Sendable () -> Bool, fence: @Sendable () -> Version?, reached: @Sendable () -> Void) async {
        var views: [Int: [String: JSONObject]] = [:]
        var versions: [Int: Version] = [:]
        var pieces: [Int: (changes: [RemoteChange], reset: Bool, snapshot: Bool)] = [:]
        var toldReached = false
        var attempt = 0
        var random = SeededRandomNumberGenerator(seed: run.seed &+ UInt64(preferred) &* 7919)
        func apply(_ target: Int, _ changes: [RemoteChange], version: Version, replace: Bool) {
            if let last = versions[target], version < last {
                run.fail("\(name) target \(target): version went back from \(last) to \(version)")
            }
            if replace { views[target] = [:] }
            for change in changes {
                views[target, default: [:]][change.path.description] = change.document?.data
            }
            versions[target] = version
            run.observations.withLock { $0.append((name, target, version, views[target] ?? [:])) }
        }
        while !stopped() {
            let port = run.nodes.port(preferred) ?? run.nodes.livePorts().randomElement(using: &random)
            guard let port else {
                try? await Task.sleep(for: .milliseconds(50))  // a client's backoff while no node runs
                continue
            }
            let connection = RawStream(port: port)
            stream.withLock { $0 = connection }
            if stopped() {
                await connection.close()
                break
            }
            guard await run.hello(connection, "\(name)-\(UUID().uuidString.prefix(8))") else {
                await connection.close()
                attempt += 1
                try? await Task.sleep(for: .milliseconds(min(1000, 20 * attempt)))  // a client's backoff
                continue
            }
            pieces = [:]
            for (target, listenTarget) in NodesRun.listenerTargets {
                connection.send(.listen(id: target, target: listenTarget, resumeFrom: versions[target]))
            }
            while let message = await connection.next(heartbeats: true) {
                switch message {
                case .heartbeat:
                    connection.send(.heartbeat)
                case .batch(let target, let batch, let reset, let more):
                    var gathered = pieces[target] ?? ([], false, false)
                    gathered.changes += batch.changes
                    gathered.reset = gathered.reset || reset
                    gathered.snapshot = gathered.snapshot || batch.isSnapshot
                    if more {
                        pieces[target] = gathered
                        continue
                    }
                    pieces[target] = nil
                    // A snapshot without a resume, or one that replaces the view, is the whole view.
                    apply(target, gathered.changes, version: batch.version, replace: gathered.reset || (gathered.snapshot && versions[target] == nil))
                case .sharedBatch(let targets, let batch):
                    for target in targets { apply(target, batch.changes, version: batch.version, replace: false) }
                case .error(let target?, let error):
                    // A listen the node could not load (its database down): listened to again.
                    run.note("\(name) target \(target): \(error.code): \(error.message)")
                    attempt += 1
                    try? await Task.sleep(for: .milliseconds(min(1000, 50 * attempt)))  // a client's backoff
                    connection.send(.listen(id: target, target: NodesRun.listenerTargets[target]!, resumeFrom: versions[target]))
                default:
                    break
                }
                if !toldReached, let fence = fence(), NodesRun.listenerTargets.keys.allSatisfy({ (versions[$0] ?? .zero) >= fence }) {
                    toldReached = true
                    reached()
                }
            }
            await connection.close()
        }
    }
}
#endif
