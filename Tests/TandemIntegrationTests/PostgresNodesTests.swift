#if os(Linux)
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import TandemCore
import PostgresNIO
@testable import TandemPostgres
import TandemServer
import TandemTesting

/// Several nodes on one PostgreSQL database: each a `PostgresServerStore` over it, as each
/// `tandem serve --postgres` process holds one.
@Suite("PostgreSQL nodes", .postgresCluster, .serialized, .timeLimit(.minutes(5)),
       .enabled(if: PostgresClusterTrait.runs, Comment(rawValue: PostgresCluster.unavailableReason ?? "")))
struct PostgresNodesTests {
    static func open(_ url: String, clock: (any Clock<Duration>)? = nil, connectionWait: Duration = .seconds(60)) async throws -> PostgresServerStore {
        var configuration = PostgresServerStoreConfiguration()
        configuration.maximumConnections = 6
        configuration.connectionWait = connectionWait
        configuration.logger.logLevel = .critical
        if let clock { configuration.clock = clock }
        return try await PostgresServerStore.open(url: try PostgresURL(url), configuration: configuration)
    }

    static func set(_ path: String, _ fields: JSONObject, id: MutationID? = nil) throws -> Mutation {
        Mutation(path: try DocumentPath(path), kind: .set(fields), id: id)
    }

    /// Returns a function that returns once each of `nodes` has heard another node.
    static func hearing(_ nodes: PostgresServerStore...) -> @Sendable () async -> Void {
        let (heard, hear) = AsyncStream.makeStream(of: Void.self)
        for node in nodes {
            node.otherNodeHeard.withLock { $0 = TestHook { hear.yield() } }
        }
        let count = nodes.count
        return {
            var seen = 0
            for await _ in heard {
                seen += 1
                if seen == count { return }
            }
        }
    }

    @Test("a node alone wakes no other node; once another says it is there, each commit wakes it, and its listeners hear the commit without waiting for a poll")
    func wakeUpsOnlyWhenOthersListen() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let clock = ManualClock()
        let a = try await Self.open(url, clock: clock)
        let runningA = Task { try await a.run() }
        defer { runningA.cancel() }
        _ = try await a.commit([Self.set("items/alone", ["n": 1])])
        #expect(a.wakeUpsSent.load(ordering: .relaxed) == 0, "no other node listens")
        #expect(!a.otherNodesListening)
        let heard = Self.hearing(a)
        // b's polls never come (a manual clock no one advances): only a wake-up can tell it.
        let b = try await Self.open(url, clock: ManualClock())
        let notices = Self.notices(of: b)
        let runningB = Task { try await b.run() }
        defer { runningB.cancel() }
        await heard()
        #expect(a.otherNodesListening)
        let result = try await a.commit([Self.set("items/heard", ["n": 2])])
        let version = result.acknowledgements[0].version
        for await notice in notices where notice.visibleThrough >= version {
            #expect(notice.batches.last?.version == version)
            break
        }
        #expect(a.wakeUpsSent.load(ordering: .relaxed) >= 1)
        // Polls of a without hearing b again (gone), and a stops waking it after three.
        runningB.cancel()
        _ = try? await runningB.value
        var polls = 0
        while polls < 20 {
            // a's poll and its pruning sleep on the clock: the poll before has been counted.
            await clock.waitForSleepers(count: 2)
            if !a.otherNodesListening { break }
            clock.advance(by: .seconds(1))
            polls += 1
        }
        #expect(!a.otherNodesListening)
        #expect(polls == 4, "a kept waking b for three polls after last hearing it")
    }

    @Test("a commit's notification carries it: another node tells it, whole, without reading the commit log; a commit too large to carry, and one after a notification that does not follow what it told, it reads from the log")
    func notificationsCarryCommits() async throws {
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        // Neither node polls (manual clocks no one advances): only notifications tell b.
        let a = try await Self.open(url, clock: ManualClock())
        let b = try await Self.open(url, clock: ManualClock())
        let heard = Self.hearing(a, b)
        let own = Self.notices(of: a)
        let notices = Self.notices(of: b)
        let (timings, timing) = AsyncStream.makeStream(of: CatchUpTiming.self)
        b.catchUpTimings.add { timing.yield($0) }
        var running: [Task<Void, any Error>] = []
        defer { running.forEach { $0.cancel() } }
        running.append(Task { try await a.run() })
        running.append(Task { try await b.run() })
        await heard()
        // Each commit awaited on b before the next: as it started, b read the log at most twice
        // more (once listening, once hearing a), so at least four of six came in notifications.
        var told = timings.makeAsyncIterator()
        var carried = 0
        for n in 1...6 {
            let version = try await a.commit([Self.set("c/d\(n % 2)", ["n": .int(n)], id: n % 3 == 0 ? nil : MutationID(clientID: "w", sequence: UInt64(n)))])
                .acknowledgements[0].version
            // The first catch-up that told it.
            while let next = await told.next() {
                guard next.through >= version else { continue }
                if !next.read { carried += 1 }
                break
            }
        }
        #expect(carried >= 4)
        // b told each commit as a made it: the same documents, times and writers' ids, in the same batches.
        let made = await Self.committed(own, through: Version(6))
        let seen = await Self.committed(notices, through: Version(6))
        #expect(made.count == 6)
        #expect(seen == made)
        // Too large to carry: b reads it from the log.
        let large = try await a.commit([Self.set("c/large", ["s": .string(String(repeating: "x", count: 9_000))])]).acknowledgements[0].version
        while let next = await told.next() {
            guard next.through >= large else { continue }
            #expect(next.read, "a commit of 9,000 bytes comes as a wake-up")
            break
        }
        // A notification in a's name whose commit does not follow what b told (as after one b
        // missed): b reads the log instead, and tells only what it holds.
        try await cluster.psql(#"SELECT pg_notify('\#(PostgresServerStore.channel)', E'\#(a.node):12\n[10,["c/forged",12,0,0,{"n":0}]]')"#, database: database)
        let after = try await a.commit([Self.set("c/after", ["n": 1])]).acknowledgements[0].version
        let rest = await Self.committed(notices, through: after)
        #expect(rest.map(\.version) == [large, after])
        #expect(rest.first?.changes.first?.document?.data["s"] == .string(String(repeating: "x", count: 9_000)))
        #expect(!rest.contains { $0.changes.contains { $0.path.description == "c/forged" } })
    }

    /// The batches a node's observers are told, through `version`.
    static func committed(_ notices: AsyncStream<CommitNotice>, through version: Version) async -> [CommittedBatch] {
        var batches: [CommittedBatch] = []
        for await notice in notices {
            batches += notice.batches
            if notice.visibleThrough >= version { break }
        }
        return batches
    }

    @Test("a node that starts listening after another said it was there learns of it at once: the other answers, and each wakes the other from then on")
    func lateListenerIsAnswered() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        // Neither node's polls come (manual clocks no one advances): only an answer can tell a of b.
        let b = try await Self.open(url, clock: ManualClock())
        let a = try await Self.open(url, clock: ManualClock())
        let logger = Logger(label: "test")
        let watcher = try await PostgresConnection.connect(configuration: try PostgresURL(url).connectionConfiguration(connectTimeout: .seconds(60)), id: 1, logger: logger)
        let notices = Self.notices(of: b)
        let heard = Self.hearing(a, b)
        var running: [Task<Void, any Error>] = []
        defer { running.forEach { $0.cancel() } }
        try await watcher.listen(on: PostgresServerStore.channel) { notifications in
            running.append(Task { try await b.run() })
            // b has said it is there, so it listens, and a does not yet.
            for try await notification in notifications where notification.payload.hasSuffix(PostgresServerStore.presence) { break }
        }
        try await watcher.close()
        #expect(!a.otherNodesListening && !b.otherNodesListening)
        running.append(Task { try await a.run() })
        await heard()
        #expect(a.otherNodesListening && b.otherNodesListening)
        let version = try await a.commit([Self.set("items/woken", ["n": 1])]).acknowledgements[0].version
        for await notice in notices where notice.visibleThrough >= version {
            #expect(notice.batches.last?.version == version)
            break
        }
        #expect(a.wakeUpsSent.load(ordering: .relaxed) >= 1)
    }

    /// A node's notices, as a stream.
    static func notices(of store: PostgresServerStore) -> AsyncStream<CommitNotice> {
        let (stream, continuation) = AsyncStream.makeStream(of: CommitNotice.self)
        store.observeCommits { continuation.yield($0) }
        return stream
    }

    @Test("commits through two nodes at once reach a third node's observers once each, in version order, with nothing left out")
    func crossNodeNotices() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let a = try await Self.open(url)
        let b = try await Self.open(url)
        let c = try await Self.open(url)
        let notices = Self.notices(of: c)
        // Every node runs, as in `tandem serve`; the writers wake c once they have heard it.
        let hearC = Self.hearing(a, b)
        let running = [a, b, c].map { node in Task { try await node.run() } }
        defer { running.forEach { $0.cancel() } }
        await hearC()
        let versions = try await withThrowingTaskGroup(of: [Version].self) { group in
            for (name, node) in [("a", a), ("b", b)] {
                group.addTask {
                    var versions: [Version] = []
                    for index in 0..<40 {
                        let result = try await node.commit([Self.set("items/\(name)\(index)", ["n": .int(index)])])
                        versions.append(result.acknowledgements[0].version)
                    }
                    return versions
                }
            }
            var all: [Version] = []
            for try await versions in group { all += versions }
            return all.sorted()
        }
        #expect(Set(versions).count == 80, "every commit has its own version")
        var heard: [Version] = []
        var paths: Set<String> = []
        var watermark = Version.zero
        for await notice in notices {
            #expect(notice.visibleThrough >= watermark, "the watermark never goes back")
            watermark = notice.visibleThrough
            for batch in notice.batches {
                #expect(batch.version <= notice.visibleThrough)
                heard.append(batch.version)
                for change in batch.changes { paths.insert(change.path.description) }
            }
            if watermark >= versions.last! { break }
        }
        #expect(heard == versions, "each commit told once, in version order")
        #expect(paths.count == 80)
    }

    /// The batches of `notices` until one is visible through `version`, as (version, path, data).
    static func batches(_ notices: AsyncStream<CommitNotice>, through version: Version) async -> (batches: [[String]], incomplete: Bool) {
        var batches: [[String]] = []
        var incomplete = false
        for await notice in notices {
            incomplete = incomplete || notice.incomplete
            for batch in notice.batches {
                batches.append(batch.changes.map { "\(batch.version) \($0.path) \($0.document.map { JSONText.encode($0.data) } ?? "-")" })
            }
            if notice.visibleThrough >= version { break }
        }
        return (batches, incomplete)
    }

    @Test("another node tells every commit whole and in version order, as the node that made it does: a document written twice before it read, and one written by two requests of one group, reach it as each commit left them")
    func everyCommitWhole() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let a = try await Self.open(url)
        // Not running: it reads what other nodes committed only when asked to.
        let b = try await Self.open(url)
        let notices = Self.notices(of: b)
        _ = try await a.commit([Self.set("c/d", ["k": 3])])
        _ = try await a.commit([Self.set("c/d", ["k": 1]), Self.set("c/x", ["k": 0])])
        let results = await a.commit([[try Self.set("c/e", ["k": 1])], [try Self.set("c/e", ["k": 2])]], limits: ServerLimits(), clientID: nil)
        #expect(results.map { (try? $0.get())?.acknowledgements[0].version } == [Version(3), Version(4)])
        b.readCommitLog()
        let heard = await Self.batches(notices, through: Version(4))
        #expect(heard.batches == [[#"1 c/d {"k":3}"#], [#"2 c/d {"k":1}"#, #"2 c/x {"k":0}"#], [#"3 c/e {"k":1}"#], [#"4 c/e {"k":2}"#]])
        #expect(!heard.incomplete)
    }

    @Test("the commit log keeps what a node running has not read and drops the rest; a node silent past nodeTimeout no longer holds it, and one behind its trimmed end says its notice is incomplete")
    func commitLogTrimmed() async throws {
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let a = try await Self.open(url)
        let b = try await Self.open(url)
        let notices = Self.notices(of: b)
        for n in 1...5 { _ = try await a.commit([Self.set("c/d\(n)", ["n": .int(n)])]) }
        // Both nodes registered at version 0 and have said nothing since: nothing goes.
        try await a.trimCommitLog()
        #expect(try await cluster.psql("SELECT count(*) FROM tandem_changes", database: database) == "5")
        // Another node trimming (it holds the lock): this one skips its turn, dropping nothing.
        try await cluster.psql("UPDATE tandem_nodes SET read_through = 4", database: database)
        let logger = Logger(label: "test")
        let other = try await PostgresConnection.connect(configuration: try PostgresURL(url).connectionConfiguration(connectTimeout: .seconds(10)), id: 1, logger: logger)
        try await other.query("BEGIN", logger: logger)
        try await other.query("SELECT pg_advisory_xact_lock(\(PostgresServerStore.logLock))", logger: logger)
        try await a.trimCommitLog()
        try await other.query("COMMIT", logger: logger)
        try await other.close()
        #expect(try await cluster.psql("SELECT count(*) FROM tandem_changes", database: database) == "5")
        #expect(try await cluster.psql("SELECT value FROM tandem_meta WHERE key = 'log_pruned_through'", database: database) == "0")
        // Both have read through 4; a node not heard from for two minutes had read through 1.
        try await cluster.psql("""
            UPDATE tandem_nodes SET read_through = 4;
            INSERT INTO tandem_nodes (node, read_through, seen_at) VALUES ('gone', 1, now() - interval '2 minutes');
            """, database: database)
        try await a.trimCommitLog()
        #expect(try await cluster.psql("SELECT string_agg(version::text, ',') FROM tandem_changes", database: database) == "5")
        #expect(try await cluster.psql("SELECT count(*) FROM tandem_nodes WHERE node = 'gone'", database: database) == "0")
        #expect(try await cluster.psql("SELECT value FROM tandem_meta WHERE key = 'log_pruned_through'", database: database) == "4")
        // b told nothing yet: commits 1 to 4 are gone for it.
        b.readCommitLog()
        let heard = await Self.batches(notices, through: Version(5))
        #expect(heard.incomplete)
        #expect(heard.batches == [[#"5 c/d5 {"n":5}"#]])
        _ = try await a.commit([Self.set("c/d6", ["n": 6])])
        b.readCommitLog()
        let next = await Self.batches(notices, through: Version(6))
        #expect(!next.incomplete)
        #expect(next.batches == [[#"6 c/d6 {"n":6}"#]])
    }

    @Test("a commit whose notification never came reaches the other node at its next poll")
    func pollCoversLostNotifications() async throws {
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        let clock = ManualClock()
        let node = try await Self.open(url, clock: clock)
        let notices = Self.notices(of: node)
        let follower = Task { try await node.run() }
        defer { follower.cancel() }
        // Listening, and waiting for its poll (the pruning waits too).
        await clock.waitForSleepers(count: 2)
        _ = try await node.commit([Self.set("items/own", ["n": 0])])
        for await notice in notices where notice.visibleThrough == Version(1) { break }
        // Another writer that commits as a node does, and sends no notification.
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        try await cluster.psql("""
            BEGIN;
            UPDATE tandem_counter SET version = version + 1 WHERE id = 1;
            INSERT INTO tandem_documents (path, collection, collection_group, version, create_time, update_time, data, body)
                SELECT 'items/quiet', 'items', 'items', version, 0, 0, '{"n":1}', '{"n":1}' FROM tandem_counter;
            INSERT INTO tandem_changes (version, path, create_time, update_time, data) SELECT version, 'items/quiet', 0, 0, '{"n":1}' FROM tandem_counter;
            COMMIT;
            """, database: database)
        clock.advance(by: .seconds(1))
        for await notice in notices {
            if notice.batches.contains(where: { $0.changes.contains { $0.path.description == "items/quiet" } }) {
                #expect(notice.visibleThrough == Version(2))
                break
            }
        }
    }

    @Test("a node whose connections PostgreSQL terminated (pg_terminate_backend) listens again and hears what was committed meanwhile")
    func listenConnectionTerminated() async throws {
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let node = try await Self.open(url)
        let notices = Self.notices(of: node)
        let follower = Task { try await node.run() }
        defer { follower.cancel() }
        let writer = try await Self.open(url)
        _ = try await writer.commit([Self.set("items/before", ["n": 0])])
        for await notice in notices where notice.visibleThrough >= Version(1) { break }
        // Every connection to the database goes, the listening one among them.
        let terminated = try await cluster.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '\(database)' AND pid <> pg_backend_pid()")
        #expect((Int(terminated) ?? 0) >= 1)
        let other = try await Self.open(url)
        _ = try await other.commit([Self.set("items/meanwhile", ["n": 1])])
        for await notice in notices {
            if notice.batches.contains(where: { $0.changes.contains { $0.path.description == "items/meanwhile" } }) { break }
        }
    }

    @Test("PostgreSQL crashes and restarts under load: commits meanwhile fail with unavailable (never wait on), the nodes reconnect by themselves, and nothing acknowledged is lost")
    func databaseRestarted() async throws {
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        // A short wait for a connection, so the commits while the database is down fail soon.
        let nodes = [try await Self.open(url, connectionWait: .seconds(1)), try await Self.open(url, connectionWait: .seconds(1))]
        var acknowledged: [String: Version] = [:]
        var refusals: [TandemError.Code] = []
        for n in 0..<30 {
            let path = "crash/w\(n)"
            if n == 10 { await cluster.crash() }
            if n == 14 { try await cluster.restart() }
            let down = (10..<14).contains(n)
            // While the database is up, a writer sends again what failed, as a client does (a
            // busy machine can take longer than the wait for a connection).
            for _ in 0..<(down ? 1 : 40) {
                switch await nodes[n % 2].commit([[try Self.set(path, ["n": .int(n)])]], limits: ServerLimits(), clientID: nil)[0] {
                case .success(let result):
                    #expect(!down, "a commit while the database was down was acknowledged")
                    acknowledged[path] = result.acknowledgements[0].version
                case .failure(let error):
                    refusals.append(error.code)
                }
                if acknowledged[path] != nil { break }
            }
        }
        #expect(refusals.count >= 4, "every commit while the database was down failed")
        #expect(refusals.allSatisfy { $0 == .unavailable }, "\(refusals)")
        #expect(acknowledged.count == 26, "the commits before the crash and after the restart were acknowledged: \(acknowledged.keys.sorted())")
        let stored = try await nodes[0].read(.collection(try CollectionPath("crash"), Query()))
        #expect(Dictionary(uniqueKeysWithValues: stored.documents.map { ($0.path.description, $0.version) }) == acknowledged)
    }

    @Test("tombstones are pruned by one node at a time: a node that finds another pruning skips its turn")
    func pruningTakesTurns() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let node = try await Self.open(url)
        for n in 0..<5 { _ = try await node.commit([Self.set("gone/d\(n)", ["n": .int(n)])]) }
        for n in 0..<5 { _ = try await node.commit([Mutation(path: try DocumentPath("gone/d\(n)"), kind: .delete)]) }
        // Another node pruning: it holds the pruning lock until its transaction ends.
        let other = try await PostgresConnection.connect(configuration: try PostgresURL(url).connectionConfiguration(connectTimeout: .seconds(10)), id: 1, logger: Logger(label: "test"))
        try await other.query("BEGIN", logger: Logger(label: "test"))
        try await other.query("SELECT pg_advisory_xact_lock(\(PostgresServerStore.pruneLock))", logger: Logger(label: "test"))
        #expect(try await node.pruneTombstones(olderThan: Date().addingTimeInterval(60)) == 0, "skipped while another node prunes")
        try await other.query("COMMIT", logger: Logger(label: "test"))
        try await other.close()
        #expect(try await node.pruneTombstones(olderThan: Date().addingTimeInterval(60)) == 5)
        await #expect(throws: TandemError.self) { _ = try await node.changes(since: Version(1), in: nil, limit: 10) }
    }

    @Test("a commit still waiting at statementTimeout (on a lock another session holds) is cancelled by PostgreSQL and answered unavailable, nothing of it kept even once the lock goes, and the node commits again")
    func statementDeadline() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        var configuration = PostgresServerStoreConfiguration()
        configuration.statementTimeout = .seconds(1)
        configuration.logger.logLevel = .critical
        let node = try await PostgresServerStore.open(url: try PostgresURL(url), configuration: configuration)
        _ = try await node.commit([Self.set("held/a", ["n": 0])])
        // Another session holds the counter's lock, as a commit that hangs would.
        let logger = Logger(label: "test")
        let other = try await PostgresConnection.connect(configuration: try PostgresURL(url).connectionConfiguration(connectTimeout: .seconds(10)), id: 1, logger: logger)
        try await other.query("BEGIN", logger: logger)
        try await other.query("SELECT version FROM tandem_counter WHERE id = 1 FOR UPDATE", logger: logger)
        let held = await node.commit([[try Self.set("held/b", ["n": 1])]], limits: ServerLimits(), clientID: nil)[0]
        guard case .failure(let error) = held else {
            Issue.record("a commit behind a held lock was acknowledged")
            return
        }
        #expect(error.code == .unavailable)
        #expect(error.message.contains("statement timeout"), "PostgreSQL cancelled it: \(error.message)")
        try await other.query("ROLLBACK", logger: logger)
        try await other.close()
        let after = try await node.commit([Self.set("held/c", ["n": 2])])
        #expect(after.acknowledgements[0].version == Version(2), "the held commit wrote nothing; the next one commits")
        let stored = try await node.read(.collection(try CollectionPath("held"), Query()))
        #expect(stored.documents.map(\.path.description) == ["held/a", "held/c"])
    }

    @Test("a write PostgreSQL cannot store (a NUL character in its path) is refused as invalid, nothing of it kept, and the store goes on")
    func unstorableWrite() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let node = try await Self.open(url)
        let result = await node.commit([[try Self.set("items/a\u{0000}b", ["n": 1])]], limits: ServerLimits(), clientID: nil)[0]
        guard case .failure(let error) = result else {
            Issue.record("a path with NUL was stored")
            return
        }
        #expect(error.code == .invalidArgument)
        #expect(try await node.document(at: try DocumentPath("items/a\u{0000}b")) == nil)
        #expect(try await node.changes(since: .zero, in: .document(try DocumentPath("items/a\u{0000}b")), limit: 10).changes.isEmpty)
        let next = try await node.commit([Self.set("items/ok", ["n": 2])])
        #expect(next.acknowledgements[0].version == Version(1), "nothing of the refused write took a version")
        // In one call beside valid writes (pipelined, or a message decided write by write), it
        // fails alone: the others apply.
        let together = await node.commit([[try Self.set("items/b", ["n": 3])], [try Self.set("items/c\u{0000}d", ["n": 4])], [try Self.set("items/e", ["n": 5])]],
                                         limits: ServerLimits(), clientID: nil)
        #expect(together.count == 3)
        #expect((try? together[0].get())?.acknowledgements.first?.version == Version(2))
        if case .failure(let error) = together[1] { #expect(error.code == .invalidArgument) } else { Issue.record("the write with NUL was stored") }
        #expect((try? together[2].get())?.acknowledgements.first?.version == Version(3))
        #expect(try await node.document(at: try DocumentPath("items/e")) != nil)
    }

    @Test("a mutation sent again through another node is answered as it was first, and a writer id stays its client's on every node")
    func retryThroughAnotherNode() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let a = try await Self.open(url)
        let b = try await Self.open(url)
        let id = MutationID(clientID: "w1", sequence: 1)
        let first = try await a.commit([[Self.set("items/x", ["n": 1], id: id)]], limits: ServerLimits(), clientID: "phone")[0].get()
        #expect(first.acknowledgements[0].status == .applied)
        let again = try await b.commit([[Self.set("items/x", ["n": 1], id: id)]], limits: ServerLimits(), clientID: "phone")[0].get()
        #expect(again.acknowledgements[0].status == .replayed)
        #expect(again.acknowledgements[0].version == first.acknowledgements[0].version)
        #expect(again.batch == nil, "nothing new committed")
        let stolen = await b.commit([[try Self.set("items/y", ["n": 2], id: MutationID(clientID: "w1", sequence: 2))]], limits: ServerLimits(), clientID: "laptop")[0]
        guard case .failure(let error) = stolen else {
            Issue.record("another client wrote under w1")
            return
        }
        #expect(error.code == .permissionDenied)
        #expect(try await a.currentVersion() == first.acknowledgements[0].version)
        // For the server's metrics: the database's size, and each group commit's requests.
        #expect((await a.storeSize() ?? 0) > 0)
        let grouped = Locked<[Int]>([])
        b.observeGroupCommits { count in grouped.withLock { $0.append(count) } }
        _ = try await b.commit([Self.set("items/z", ["n": 3])])
        #expect(grouped.withLock { $0 } == [1])
    }

    @Test("a commit through another node between a commit's read and its write sends it back to be decided again under the lock: it sees that commit, and overwrites nothing")
    func commitBetweenReadAndWrite() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let a = try await Self.open(url)
        let b = try await Self.open(url)
        let between = Locked<CommitResult?>(nil)
        a.betweenReadAndWrite.withLock { hook in
            hook = TestHook {
                a.betweenReadAndWrite.withLock { $0 = nil }
                between.withLock { $0 = nil }
                let result = try? await b.commit([[try! Self.set("items/x", ["by": "b"])]], limits: ServerLimits(), clientID: "b")[0].get()
                between.withLock { $0 = result }
            }
        }
        // Read when items/x was not there; b creates it before a writes.
        let created = try Self.set("items/x", ["by": "a"]).requiring(.exists(false))
        let result = await a.commit([[created], [try Self.set("items/y", ["by": "a"])]], limits: ServerLimits(), clientID: "a")
        let byB = try #require(between.withLock { $0 }, "b committed in the gap")
        #expect(a.conflicts.load(ordering: .relaxed) == 1, "a's write found b's commit and went again under the lock")
        let first = try result[0].get().acknowledgements[0]
        #expect(first.status == .refused, "a's create must not overwrite b's document")
        #expect(first.error?.code == .failedPrecondition)
        #expect(first.document?.data["by"] == "b", "the refusal shows the document that is there")
        let second = try result[1].get()
        #expect(second.acknowledgements[0].version > byB.acknowledgements[0].version, "a's version follows b's, which became visible first")
        let x = try await a.read(.document(try DocumentPath("items/x")))
        #expect(x.documents.first?.data["by"] == "b")
        #expect(x.documents.first?.version == byB.acknowledgements[0].version)
        #expect(b.conflicts.load(ordering: .relaxed) == 0)
    }

    @Test("while writers on two nodes commit, a reader following the change feed from a third misses no commit and sees versions only increase")
    func feedFollowsVisibility() async throws {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let nodes = [try await Self.open(url), try await Self.open(url)]
        let reader = try await Self.open(url)
        let writing = Locked(2 * 2)
        let checker = Task { () throws -> (seen: [String: Version], ordered: Bool) in
            var since = Version.zero
            var seen: [String: Version] = [:]
            var ordered = true
            // Reads while the writers write, then once more after they are done.
            while true {
                let done = writing.value == 0
                let page = try await reader.changes(since: since, in: nil, limit: 25)
                for change in page.changes {
                    if change.version <= since { ordered = false }
                    seen[change.path.description] = change.version
                }
                if let last = page.changes.last?.version, last > page.version { ordered = false }
                since = page.version
                if done && !page.hasMore { return (seen, ordered) }
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, node) in nodes.enumerated() {
                for writer in 0..<2 {
                    group.addTask {
                        defer { writing.withLock { $0 -= 1 } }
                        for n in 0..<60 {
                            _ = try await node.commit([Self.set("feed/n\(index)w\(writer)i\(n)", ["n": .int(n)])])
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let (seen, ordered) = try await checker.value
        #expect(ordered, "the feed's versions only increase")
        #expect(seen.count == 2 * 2 * 60, "every commit was read, none skipped")
        let stored = try await reader.read(.collection(try CollectionPath("feed"), Query()))
        #expect(Dictionary(uniqueKeysWithValues: stored.documents.map { ($0.path.description, $0.version) }) == seen)
    }
}

/// `tandem serve --postgres`, run as real processes on one database.
@Suite("PostgreSQL serve nodes", .postgresCluster, .serialized, .timeLimit(.minutes(5)),
       .enabled(if: PostgresClusterTrait.runs, Comment(rawValue: PostgresCluster.unavailableReason ?? "")))
struct PostgresServeTests {
    /// Starts `tandem serve --postgres URL` on a free port; returns it with its URL.
    static func node(_ url: String) async throws -> (RunningProcess, URL) {
        let process = try RunningProcess(["serve", "--port", "0", "--postgres", url])
        let line = try #require(await process.nextLine(), "tandem serve printed nothing")
        let address = try #require(line.split(separator: " ").last.map(String.init), "no address in '\(line)'")
        return (process, try #require(URL(string: address)))
    }

    /// One write through a node's HTTP API; its version, or nil when the node did not answer.
    static func write(_ node: URL, path: String, n: Int) async -> Version? {
        var request = URLRequest(url: node.appendingPathComponent("v1/commit"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"writes": [{"op": "set", "path": "\#(path)", "data": {"n": \#(n)}}]}"#.utf8)
        guard let (data, response) = try? await URLSession.shared.data(for: request), (response as? HTTPURLResponse)?.statusCode == 200,
              let answer = try? JSONText.parse(bytes: data), case .int(let version)? = answer[field: "version"] else { return nil }
        return Version(UInt64(version))
    }

    @Test("bench server --postgres runs at a small size against a database and prints each figure beside its baseline and target")
    func benchServerPostgres() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let (cluster, url) = try await PostgresClusterTrait.freshDatabase()
        // Timings here mean nothing (a debug build, a tiny size): only that every part runs and
        // reports. Kept small: it runs beside the other suites, on the same two cores.
        let result = try await CLIProcess.run(["bench", "server", "--postgres", url, "--writes", "16", "--rounds", "2", "--latency-commits", "10"])
        #expect(result.status == 0, "\(result.err)")
        for figure in ["1 client writing one at a time vs postgres-nio inserting the same documents, 1 per transaction (the fastest of 2 rounds each, in turns)",
                       "16 clients writing one at a time vs postgres-nio inserting the same documents, 16 per transaction",
                       "vs postgres-nio inserting 16 documents per statement",
                       "sqlite, the same writes in the same run",
                       "the same writes through node A while node B runs",
                       "commit-to-listener latency on one node, 100 listeners:",
                       "cross-node commit-to-listener latency (a commit on node A, listeners on node B), 100 listeners:",
                       "(target p50 ≤ 3 ms, p99 ≤ 15 ms:",
                       "commit-to-listener latency on one node, 100 listeners, while 16 clients commit through it without pause:",
                       "cross-node commit-to-listener latency, 100 listeners on node B, while 16 clients commit through node A without pause:",
                       "(target p50 ≤ 5 ms, p99 ≤ 25 ms:",
                       "where that time goes (median of each measured commit; the listeners' median arrival): commit to wake-up",
                       "sqlite, in the same run: commit-to-listener latency on one node, 100 listeners:"] {
            #expect(result.out.contains(figure), "missing: \(figure)")
        }
        #expect(result.out.components(separatedBy: "baseline:").count - 1 == 3)
        // The baselines' tables are gone; the store's documents stay, under this run's names.
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let tables = try await cluster.psql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'tandem\\_bench\\_%'", database: database)
        #expect(tables == "0")
    }

    @Test("a URL it cannot use, a server it cannot reach and a database that is not there stop tandem serve at once with exit 2 and say which")
    func badDatabases() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let cluster = try #require(PostgresClusterTrait.cluster)
        try await cluster.psql("CREATE DATABASE ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        let cases: [(String, String)] = [
            ("mysql://tandem@127.0.0.1/x", "starts with postgres://"),
            ("postgres://127.0.0.1/x", "names no user"),
            ("postgres://tandem@127.0.0.1:1/x?sslmode=disable", "Could not connect to PostgreSQL"),
            (cluster.url(database: "missing"), "does not exist"),
            // Credentials it refuses: the cluster trusts its one user, so a user it does not know.
            ("postgres://intruder@127.0.0.1:\(cluster.port)/postgres?sslmode=disable", #"role "intruder" does not exist"#),
            (cluster.url(database: "ascii"), "needs a UTF8 database"),
        ]
        for (url, message) in cases {
            let result = try await CLIProcess.run(["serve", "--port", "0", "--postgres", url])
            #expect(result.status == 2, "\(url): \(result.err)")
            #expect(result.err.contains(message), "\(url): \(result.err)")
        }
    }

    @Test("two nodes on one database: writes through one, killed with SIGKILL halfway, then through the other, reach a listener on the second once each, in version order; every acknowledged write is stored")
    func nodeKilledMidLoad() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let (first, firstURL) = try await Self.node(url)
        let (second, secondURL) = try await Self.node(url)
        defer {
            first.signal(SIGKILL)
            second.signal(SIGTERM)
        }
        let listening = RunningClient(url: secondURL, id: "listener")
        let batches = listening.client.listen(.collection(collectionPath("load"), Query()))
        var acknowledged: [String: Version] = [:]
        for n in 0..<60 {
            if n == 30 {
                // Killed between two writes it acknowledged: the writer moves to the other node.
                first.signal(SIGKILL)
                _ = await first.waitForExit()
            }
            let path = "load/w\(n)"
            // Typed, so #require unwraps (assigned straight into the dictionary it checked nothing).
            let version: Version = try #require(await Self.write(n < 30 ? firstURL : secondURL, path: path, n: n), "write \(n) was not acknowledged")
            acknowledged[path] = version
        }
        var seen: [String: Version] = [:]
        var last = Version.zero
        var doubles = 0
        for try await batch in batches {
            if !batch.isSnapshot {
                #expect(batch.version > last, "versions only increase")
            }
            last = max(last, batch.version)
            for change in batch.changes {
                if seen[change.path.description] != nil && !batch.isSnapshot { doubles += 1 }
                seen[change.path.description] = change.version
            }
            if seen.count == acknowledged.count { break }
        }
        #expect(doubles == 0, "no change came twice")
        #expect(seen == acknowledged, "the listener ends equal to what was acknowledged")
        let store = try await PostgresServerStore.open(url: try PostgresURL(url), configuration: {
            var configuration = PostgresServerStoreConfiguration()
            configuration.connectionWait = .seconds(60)
            configuration.logger.logLevel = .critical
            return configuration
        }())
        let stored = try await store.read(.collection(collectionPath("load"), Query()))
        #expect(Dictionary(uniqueKeysWithValues: stored.documents.map { ($0.path.description, $0.version) }) == acknowledged, "every acknowledged write is stored")
        store.close()
        await listening.stop()
    }
}

extension PostgresServeTests {
    /// What one listener saw: each document's last version, and whether versions only increased
    /// and nothing came twice.
    struct Seen {
        var documents: [String: Version] = [:]
        var last = Version.zero
        var inOrder = true
        var doubles = 0

        mutating func take(_ batch: RemoteChangeBatch) {
            if !batch.isSnapshot && batch.version <= last { inOrder = false }
            last = max(last, batch.version)
            for change in batch.changes {
                if !batch.isSnapshot, let known = documents[change.path.description], known >= change.version { doubles += 1 }
                documents[change.path.description] = change.version
            }
        }
    }

    @Test("three nodes, writers and listeners spread across them; one node killed mid-load: its writer and its listener move to the others and resume, and every listener ends equal to the store, having seen versions only increase and nothing twice")
    func threeNodes() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        var started: [(process: RunningProcess, url: URL)] = []
        for _ in 0..<3 { started.append(try await Self.node(url)) }
        let nodes = started
        defer { for node in nodes { node.process.signal(SIGKILL) } }
        let target = ListenTarget.collection(collectionPath("spread"), Query())
        let listeners = nodes.enumerated().map { index, node in RunningClient(url: node.url, id: "listener\(index)") }
        // Each listener's stream, read into what it saw: the first node's until its node is
        // killed (then it moves), the others' until they have every write.
        let total = 3 * 40
        let seen = (0..<3).map { _ in Locked(Seen()) }
        let streams = listeners.map { $0.client.listen(target) }
        let readers = (0..<3).map { index in
            Task {
                for try await batch in streams[index] {
                    seen[index].withLock { $0.take(batch) }
                    if index > 0 && seen[index].value.documents.count >= total { return }
                }
            }
        }
        // Three writers, one a node; the first node's writer moves on when the node is killed.
        let killed = Locked(false)
        let acknowledged = try await withThrowingTaskGroup(of: [String: Version].self) { group in
            for writer in 0..<3 {
                group.addTask {
                    var acknowledged: [String: Version] = [:]
                    for n in 0..<40 {
                        let node = writer == 0 && killed.value ? nodes[1].url : nodes[writer].url
                        let path = "spread/w\(writer)-\(n)"
                        guard let version = await Self.write(node, path: path, n: n) else {
                            throw TandemError(.unavailable, "write \(path) through \(node) was not acknowledged")
                        }
                        acknowledged[path] = version
                        if writer == 0 && n == 19 {
                            nodes[0].process.signal(SIGKILL)
                            _ = await nodes[0].process.waitForExit()
                            killed.value = true
                        }
                    }
                    return acknowledged
                }
            }
            var all: [String: Version] = [:]
            for try await part in group { all.merge(part) { $1 } }
            return all
        }
        #expect(acknowledged.count == total)
        // The first node's listener moves to the third node and resumes where it was.
        readers[0].cancel()
        _ = try? await readers[0].value
        await listeners[0].stop()
        let resumedFrom = seen[0].value.last
        let moved = RunningClient(url: nodes[2].url, id: "listener0-moved")
        let resumed = moved.client.listen(target, resumeFrom: resumedFrom)
        for try await batch in resumed {
            seen[0].withLock { $0.take(batch) }
            if seen[0].value.documents == acknowledged { break }
        }
        for index in 1..<3 { _ = try? await readers[index].value }
        let store = try await PostgresServerStore.open(url: try PostgresURL(url), configuration: {
            var configuration = PostgresServerStoreConfiguration()
            configuration.connectionWait = .seconds(60)
            configuration.logger.logLevel = .critical
            return configuration
        }())
        let stored = Dictionary(uniqueKeysWithValues: try await store.read(target).documents.map { ($0.path.description, $0.version) })
        store.close()
        #expect(stored == acknowledged, "every acknowledged write is stored")
        for index in 0..<3 {
            let view = seen[index].value
            #expect(view.documents == stored, "listener \(index) ends equal to the store")
            #expect(view.inOrder, "listener \(index) saw versions only increase")
            #expect(view.doubles == 0, "listener \(index) saw nothing twice")
        }
        await moved.stop()
        for listener in listeners.dropFirst() { await listener.stop() }
    }
}

/// Queries on the PostgreSQL store, whose filters it partly applies in SQL, against the memory
/// store, which evaluates everything in Swift: the same answers, in the same order.
@Suite("PostgreSQL queries", .postgresCluster, .serialized, .timeLimit(.minutes(5)),
       .enabled(if: PostgresClusterTrait.runs, Comment(rawValue: PostgresCluster.unavailableReason ?? "")))
struct PostgresQueryTests {
    @Test("seeded documents and queries: the PostgreSQL store answers each query exactly as the shared evaluator does", arguments: [UInt64(7), 1_234, 99_001])
    func sameAnswers(seed: UInt64) async throws {
        var random = SeededRandomNumberGenerator(seed: seed)
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let postgres = try await PostgresNodesTests.open(url)
        let memory = MemoryServerStore(clock: ManualClock())
        // Values of every kind, numbers that are equal across int and double, near misses.
        let values: [JSONValue] = [.null, true, false, 0, 1, 2, .double(1.0), .double(2.5), .double(-0.0), 9_007_199_254_740_993, .double(9_007_199_254_740_992),
                                   "a", "b", "ab", "", "é", "e\u{301}", "K", "\u{212A}", "\u{0000}x", .array([1, "a"]), .array([]), .array([.double(1.0)]), .object(["k": 1]), .object([:])]
        func value() -> JSONValue { values[Int.random(in: 0..<values.count, using: &random)] }
        let scores: [JSONValue] = [0, 1, -1, 2, .double(1.5), .double(-0.5), .double(2.0), 9_007_199_254_740_991, 9_007_199_254_740_993, .double(9_007_199_254_740_992),
                                   .double(1e300), .double(-1e300), .int(Int.max), .int(Int.min), "7", .null, true]
        var writes: [Mutation] = []
        for index in 0..<80 {
            var fields: JSONObject = [:]
            if Bool.random(using: &random) { fields["a"] = value() }
            if Bool.random(using: &random) { fields["b"] = .object(["c": value()]) }
            if Bool.random(using: &random) { fields["tags"] = .array((0..<Int.random(in: 0..<3, using: &random)).map { _ in value() }) }
            // Numbers that order differently as text, as doubles and as integers, near and past 2^53.
            if Int.random(in: 0..<4, using: &random) > 0 { fields["score"] = scores[Int.random(in: 0..<scores.count, using: &random)] }
            writes.append(Mutation(path: try DocumentPath("things/t\(index)"), kind: .set(fields)))
        }
        _ = try await postgres.commit(writes)
        _ = try await memory.commit(writes)
        let fields: [FieldPath] = ["a", try FieldPath(dotted: "b.c"), "tags", "score"]
        func filter(_ ops: [Query.FilterOperator]) -> Filter {
            let op = ops[Int.random(in: 0..<ops.count, using: &random)]
            let operand: JSONValue = [.in, .notIn, .arrayContainsAny].contains(op) ? .array([value(), value()]) : value()
            return Filter.whereField(fields[Int.random(in: 0..<fields.count, using: &random)], op, operand)
        }
        var withOr = 0
        for _ in 0..<120 {
            var query = Query()
            // Half the queries only filter by equality (or none), which PostgreSQL applies as a superset.
            let exactOnly = Bool.random(using: &random)
            let ops: [Query.FilterOperator] = exactOnly ? [.equal, .in] : Query.FilterOperator.allCases
            for _ in 0..<Int.random(in: 0...2, using: &random) {
                query = query.whereFilter(filter(ops))
            }
            // A third also have an or of two or three filters, some of them ands: PostgreSQL reads
            // the OR of its branches when each translates (most often in the equality-only half),
            // reads without it when one does not, and the evaluator decides every candidate.
            if Int.random(in: 0..<3, using: &random) == 0 {
                var branches: [Filter] = []
                for _ in 0..<Int.random(in: 2...3, using: &random) {
                    branches.append(Int.random(in: 0..<3, using: &random) == 0 ? Filter.andFilter([filter(ops), filter(ops)]) : filter(ops))
                }
                query = query.whereFilter(Filter.orFilter(branches))
                withOr += 1
            }
            let orders = Int.random(in: 0...2, using: &random)
            for _ in 0..<orders {
                query = query.order(by: [fields[3], fields[3], fields[0], fields[1]][Int.random(in: 0..<4, using: &random)], descending: Bool.random(using: &random))
            }
            // Cursors, one or two at a time, of the first order's value (numbers near the keys'
            // edges, and values of every type).
            if orders > 0 {
                for position: Query.CursorPosition in [.startAt, .startAfter, .endAt, .endBefore] where Int.random(in: 0..<4, using: &random) == 0 {
                    let bound = Bool.random(using: &random) ? scores[Int.random(in: 0..<scores.count, using: &random)] : value()
                    query = query.cursor(position, values: orders > 1 && Bool.random(using: &random) ? [bound, value()] : [bound])
                }
            }
            switch Int.random(in: 0..<4, using: &random) {
            case 0: break
            case 1 where orders > 0: query = query.limit(toLast: Int.random(in: 0...8, using: &random))
            default: query = query.limit(to: Int.random(in: 0...8, using: &random))
            }
            let target = ListenTarget.collection(try CollectionPath("things"), query)
            let expected = await Result { try await memory.read(target).documents.map(\.path) }
            let actual = await Result { try await postgres.read(target).documents.map(\.path) }
            switch (expected, actual) {
            case (.success(let expected), .success(let actual)):
                #expect(actual == expected, "\(query)")
            case (.failure(let expected as TandemError), .failure(let actual as TandemError)):
                #expect(actual.code == expected.code, "\(query)")
            default:
                Issue.record("\(query): memory \(expected), PostgreSQL \(actual)")
            }
        }
        #expect(postgres.limitedReads.load(ordering: .relaxed) > 5, "PostgreSQL applied the limit of some queries")
        #expect(withOr > 20, "queries with an or were compared")
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
#endif
