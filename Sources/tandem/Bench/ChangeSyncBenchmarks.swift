import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The figures of `tandem bench changes`: records sent and fetched through a ChangeSyncEngine,
/// beside the same records through plain `POST /v1/commit` and `GET /v1/changes` calls, in one run,
/// on one server.
enum ChangeSyncBenchmarks {
    /// The four measures of one round, and the plain calls' two.
    struct Round {
        var plainSend: Duration
        var plainFetch: Duration
        var send: [Bool: Duration] = [:]
        var fetch: [Bool: Duration] = [:]
    }

    /// `rounds` rounds, each on a fresh server: the plain calls, then the engine with plain and with
    /// encrypted records. Each figure is the best of its rounds (the machine's noise only ever
    /// slows a run down), and each side is measured in every round, so both meet the same noise.
    static func run(records: Int, rounds: Int, directory: URL) async throws -> BenchReport {
        var report = BenchReport(title: "tandem bench changes")
        var results: [Round] = []
        for round in 0..<rounds {
            results.append(try await self.round(records: records, directory: directory.appendingPathComponent("round-\(round)")))
        }
        let plainSend = results.map(\.plainSend).min()!
        let plainFetch = results.map(\.plainFetch).min()!
        for encrypted in [false, true] {
            let label = encrypted ? "encrypted records (a sealed property each)" : "records"
            report.add("changes: \(label) sent through ChangeSyncEngine vs POST /v1/commit, 400 a request",
                       ours: results.map { $0.send[encrypted]! }.min()!, baseline: plainSend, operations: records, unit: "records", target: encrypted ? 2.0 : 1.0 / 0.7)
            report.add("changes: \(label) fetched through ChangeSyncEngine vs GET /v1/changes, 1,000 a page",
                       ours: results.map { $0.fetch[encrypted]! }.min()!, baseline: plainFetch, operations: records, unit: "records", target: encrypted ? 2.0 : 1.0 / 0.7)
        }
        report.notes.append("changes: each figure is the best of \(rounds) rounds, each round on a fresh server measuring every side")
        report.notes.append("changes: the targets are ≥ 70 % of the plain calls' rate both ways (time ratio ≤ 1.43×), ≥ 50 % for encrypted records (≤ 2×)")
        return report
    }

    static func round(records: Int, directory: URL) async throws -> Round {
        let tokens = try await BearerTokens(secret: String(repeating: "bench-secret-", count: 4))
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens)
        // Both sides send as fast as they can: the per-user and per-connection write rates would
        // pace them alike, and hide the difference measured.
        configuration.limits.maximumWritesPerSecond = 10_000_000
        configuration.limits.maximumWritesPerSecondPerUser = 10_000_000
        let server = try await LiveServer.start(directory: directory.appendingPathComponent("server"), configuration: configuration)
        let token = try tokens.mint(subject: "bench", lifetime: .seconds(86_400))

        // The baseline: the same records, 400 to a commit, then read back 1,000 to a page.
        let plainPath = "users/bench/zones/plain/records"
        let clock = ContinuousClock()
        let plainSend = try await clock.measure {
            var start = 0
            while start < records {
                let writes = (start..<min(start + 400, records)).map { index -> JSONValue in
                    .object(["op": "set", "path": .string("\(plainPath)/r\(index)"), "data": .object(fields(index))])
                }
                _ = try await http(server, "POST", "/v1/commit", token: token, body: .object(["writes": .array(writes)]))
                start += 400
            }
        }
        var fetchedPlain = 0
        let plainFetch = try await clock.measure {
            var since = 0
            while true {
                let page = try await http(server, "GET", "/v1/changes?since=\(since)&limit=1000&collection=\(plainPath)", token: token, body: nil)
                if case .array(let changes)? = page[field: "changes"] { fetchedPlain += changes.count }
                if case .int(let version)? = page[field: "version"] { since = version }
                if page[field: "hasMore"] != true { break }
            }
        }
        precondition(fetchedPlain == records, "bench: the plain feed gave \(fetchedPlain) of \(records) records")
        var round = Round(plainSend: plainSend, plainFetch: plainFetch)
        for encrypted in [false, true] {
            let zone = encrypted ? "sealed" : "open"
            (round.send[encrypted], round.fetch[encrypted]) = try await engineRun(server, token: token, zone: zone, records: records, encrypted: encrypted, directory: directory)
        }
        await server.stop()
        return round
    }

    /// A small record's fields: a title and a number.
    static func fields(_ index: Int) -> JSONObject {
        ["_type": "Item", "title": .string("item \(index)"), "n": .int(index)]
    }

    /// One device sends `records` through its engine (until the server answered every one); another
    /// fetches them all (until its token covers them).
    static func engineRun(_ server: LiveServer, token: String, zone: String, records: Int, encrypted: Bool, directory: URL) async throws -> (Duration, Duration) {
        let key = SymmetricKey(size: .bits256)
        func device(_ name: String) async throws -> (TandemClient, Task<Void, any Error>, ChangeSyncEngine) {
            var clientConfiguration = TandemClientConfiguration()
            clientConfiguration.clientID = "\(zone)-\(name)"
            clientConfiguration.token = token
            clientConfiguration.storageDirectory = directory.appendingPathComponent("\(zone)-\(name)")
            clientConfiguration.logger.logLevel = .critical
            let client = TandemClient(url: server.url, configuration: clientConfiguration)
            let task = Task { try await client.run() }
            await client.waitUntilConnected()
            for await state in client.authStates() where state.uid == "bench" { break }
            var configuration = ChangeSyncEngine.Configuration(zoneName: zone)
            if encrypted { configuration.encryption = try RecordEncryption(keyID: "bench", key: key) }
            let engine = try ChangeSyncEngine(client: client, configuration: configuration)
            engine.start()
            for await status in engine.states() where status.isRunning && status.account == "bench" && status.currentQueue == nil && status.pendingCount == 0 { break }
            return (client, task, engine)
        }
        let clock = ContinuousClock()
        let (_, senderTask, sender) = try await device("sender")
        // Sent: every record answered by the server (the device fetching its own records back, as
        // its subscription asks it to, is not counted).
        let sentEvents = sender.events()
        let send = try await clock.measure {
            var start = 0
            while start < records {
                let chunk = (start..<min(start + 1_000, records)).map { index in
                    SyncedRecord(id: "r\(index)", type: "Item",
                                 properties: ["title": encrypted ? .encryptedValue(.string("item \(index)")) : .value(.string("item \(index)")), "n": .value(.int(index))],
                                 metadata: RecordMetadata(version: Version(0)))
                }
                try sender.sendChanges(modify: chunk, delete: [])
                start += chunk.count
            }
            var answered = 0
            for await event in sentEvents {
                if case .sent(let results) = event { answered += results.saved.count + results.failed.count }
                if answered >= records { break }
            }
        }
        // The sender stops before the fetch is measured: fetching its own records back (as its
        // subscription asks it to) would share the machine with the device measured.
        sender.stop()
        let (_, receiverTask, receiver) = try await device("receiver")
        let events = receiver.events()
        var fetched = 0
        let fetch = await clock.measure {
            receiver.fetchChanges(token: nil)
            for await event in events {
                if case .fetchedModifications(let records) = event { fetched += records.count }
                if fetched >= records { break }
            }
        }
        precondition(fetched >= records, "bench: the engine fetched \(fetched) of \(records) records")
        receiver.stop()
        senderTask.cancel()
        receiverTask.cancel()
        return (send, fetch)
    }

    static func http(_ server: LiveServer, _ method: String, _ path: String, token: String, body: JSONValue?) async throws -> JSONValue {
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        if let body {
            request.httpBody = Data(JSONText.encode(body).utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        guard let status = (response as? HTTPURLResponse)?.statusCode, status == 200 else {
            throw TandemError(.internal, "bench: \(method) \(path) answered \(String(decoding: data, as: UTF8.self))")
        }
        return try JSONText.parse(bytes: data)
    }
}
