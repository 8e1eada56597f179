import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import MetricsTestKit
import Testing
import WSClient
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// `GET /metrics` after known traffic, over HTTP and the stream: the counts are exact.
@Suite("Metrics", .timeLimit(.minutes(5)))
struct MetricsTests {
    /// The samples of a scrape, by name and labels as written (`tandem_commits_total{outcome="committed"}`).
    static func scrape(_ server: LiveServer) async throws -> [String: Double] {
        let (data, response) = try await URLSession.shared.data(from: server.url.appendingPathComponent("metrics"))
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        var samples: [String: Double] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    static func post(_ server: LiveServer, _ path: String, _ body: String) async throws -> Int {
        var request = URLRequest(url: server.url.appendingPathComponent(path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    @Test("after known writes, refusals and errors over HTTP and the stream, each counter holds exactly what happened")
    func countsAreExact() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.stop() } }
        let before = try await Self.scrape(server)
        #expect(before["tandem_commits_total{outcome=\"committed\"}"] == 0)
        #expect(before["tandem_errors_total{code=\"not-found\"}"] == 0, "every code is there from the start")

        // HTTP: three writes, one of them refused by its precondition; a path no route serves;
        // a body that is not JSON.
        #expect(try await Self.post(server, "v1/commit", #"{"writes": [{"op": "set", "path": "items/a", "data": {"n": 1}}]}"#) == 200)
        #expect(try await Self.post(server, "v1/commit", #"{"writes": [{"op": "set", "path": "items/b", "data": {"n": 2}}]}"#) == 200)
        // Refused: answered over HTTP as an error with the refusal's code.
        #expect(try await Self.post(server, "v1/commit", #"{"writes": [{"op": "set", "path": "items/a", "data": {"n": 3}, "precondition": {"exists": false}}]}"#) == 412)
        let (_, missing) = try await URLSession.shared.data(from: server.url.appendingPathComponent("nowhere"))
        #expect((missing as? HTTPURLResponse)?.statusCode == 404)
        #expect(try await Self.post(server, "v1/commit", "{not json") == 400)

        // The stream: two writes in one request, and a listen the server refuses.
        let client = TandemClient(url: server.url, configuration: {
            var configuration = TandemClientConfiguration()
            configuration.clientID = "metrics"
            configuration.logger.logLevel = .critical
            return configuration
        }())
        let running = Task { try await client.run() }
        defer { running.cancel() }
        await client.waitUntilConnected()
        _ = try await client.commit([.set(try DocumentPath("items/c"), ["n": 4]), .set(try DocumentPath("items/d"), ["n": 5])])
        await #expect(throws: TandemError.self) {
            for try await _ in client.listen(.collection(try CollectionPath("items"), Query().limit(to: -1))) {}
        }

        let after = try await Self.scrape(server)
        // The precondition's refusal wrote nothing: refused, not committed (the console's
        // "Commits" counted it).
        #expect(after["tandem_commits_total{outcome=\"committed\"}"] == 3)
        #expect(after["tandem_commits_total{outcome=\"refused\"}"] == 1)
        #expect(after["tandem_commits_total{outcome=\"replayed\"}"] == 0)
        #expect(after["tandem_commits_total{outcome=\"failed\"}"] == 0)
        #expect(after["tandem_mutations_total{outcome=\"applied\"}"] == 4)
        #expect(after["tandem_mutations_total{outcome=\"refused\"}"] == 1)
        #expect(after["tandem_mutations_total{outcome=\"replayed\"}"] == 0)
        #expect(after["tandem_errors_total{code=\"not-found\"}"] == 1)
        #expect(after["tandem_errors_total{code=\"failed-precondition\"}"] == 1)
        #expect(after["tandem_errors_total{code=\"invalid-argument\"}"] == 2, "the body that is not JSON, and the listen with a negative limit")
        #expect(after["tandem_commit_duration_seconds_count"] == 4)
        #expect(after["tandem_group_commit_requests_sum"] == 4, "every request that reached the store was in one group commit")
        #expect((after["tandem_store_bytes"] ?? 0) > 0)
        #expect(after["tandem_commit_version"] == 3)
        #expect(after["tandem_stream_sessions"] == 1)
        #expect((after["tandem_received_bytes_total"] ?? 0) > 0)
        #expect((after["tandem_sent_bytes_total"] ?? 0) > 0)
        #expect(after["tandem_rate_limited_total"] == 0)
        // The buckets start at 50 µs.
        #expect(after.keys.contains("tandem_fanout_latency_seconds_bucket{le=\"0.00005\"}"))
        // Every metric says what it counts, in a # HELP line just before its # TYPE line.
        let (data, _) = try await URLSession.shared.data(from: server.url.appendingPathComponent("metrics"))
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
        let types = lines.indices.filter { lines[$0].hasPrefix("# TYPE ") }
        #expect(types.count >= 15)
        for index in types {
            let name = lines[index].split(separator: " ")[2]
            #expect(index > 0 && lines[index - 1].hasPrefix("# HELP \(name) ") && lines[index - 1].count > "# HELP \(name) ".count + 10, "\(name) has no help")
        }
    }

    @Test("messages over a connection's rate are refused with retryAfter, and counted as rate-limited and as resource-exhausted, each once")
    func rateLimitedCounted() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumMessagesPerSecond = 2
        // Time stands still: the second's budget never refills, so what is refused is exact.
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(configuration: configuration)
        var logger = Logger(label: "rate")
        logger.logLevel = .critical
        let replies = Locked<[String]>([])
        let client = WebSocketClient(url: "ws://127.0.0.1:\(server.port)/v1/stream", logger: logger) { inbound, outbound, _ in
            var messages = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            try await outbound.writeTextMessage(ClientMessage.hello(clientID: "rate", protocolVersion: TandemVersion.wireProtocol, token: nil).text)
            _ = try await messages.next()  // welcome
            for _ in 0..<4 { try await outbound.writeTextMessage(ClientMessage.heartbeat.text) }
            for _ in 0..<4 {
                if case .text(let text) = try await messages.next() { replies.withLock { $0.append(text) } }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        try await client.run()
        // The hello and one heartbeat fit in the two a second; three heartbeats do not.
        #expect(replies.withLock { $0.filter { $0.contains("resource-exhausted") }.count } == 3)
        let after = try await Self.scrape(server)
        #expect(after["tandem_rate_limited_total"] == 3)
        #expect(after["tandem_errors_total{code=\"resource-exhausted\"}"] == 3)
        await server.stop()
    }

    @Test("a server with rules and no token secret says how to reach its metrics: no caller can, and the refusal names --auth-secret")
    func rulesWithoutSecret() async throws {
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: nil, rules: .ownDocuments)
        let server = try await LiveServer.start(configuration: configuration)
        let (data, response) = try await URLSession.shared.data(from: server.url.appendingPathComponent("metrics"))
        #expect((response as? HTTPURLResponse)?.statusCode == 401)
        #expect(String(decoding: data, as: UTF8.self).contains("--auth-secret"), "\(String(decoding: data, as: UTF8.self))")
        await server.stop()
    }

    @Test("on a secured server the metrics are for a token with an admin claim: none is unauthenticated, another is denied, and both are counted")
    func securedMetrics() async throws {
        let tokens = try await BearerTokens(secret: "the-metrics-secret-that-is-long-enough")
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens)
        let server = try await LiveServer.start(configuration: configuration)
        func status(_ token: String?) async throws -> (Int, String) {
            var request = URLRequest(url: server.url.appendingPathComponent("metrics"))
            if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
        }
        let (none, _) = try await status(nil)
        #expect(none == 401)
        let (user, _) = try await status(try tokens.mint(subject: "ada"))
        #expect(user == 403)
        let (admin, text) = try await status(try tokens.mint(subject: "ops", claims: ["admin": true]))
        #expect(admin == 200)
        #expect(text.contains("tandem_errors_total{code=\"unauthenticated\"} 1"))
        #expect(text.contains("tandem_errors_total{code=\"permission-denied\"} 1"))
        await server.stop()
    }

    @Test("two servers in one process keep their counts apart")
    func serversCountApart() async throws {
        let first = try await LiveServer.start()
        let second = try await LiveServer.start()
        #expect(try await Self.post(first, "v1/commit", #"{"writes": [{"op": "set", "path": "items/a", "data": {"n": 1}}]}"#) == 200)
        #expect(try await Self.scrape(first)["tandem_commits_total{outcome=\"committed\"}"] == 1)
        #expect(try await Self.scrape(second)["tandem_commits_total{outcome=\"committed\"}"] == 0)
        await first.stop()
        await second.stop()
    }
}

/// The client's metrics, through swift-metrics' test factory.
@Suite("Client metrics", .timeLimit(.minutes(5)))
struct ClientMetricsTests {
    @Test("the client reports each reconnection, each engine's outbox depth and the writes refused to it by code; a client without metrics gives its engines none")
    func clientMetrics() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let metrics = TestMetrics()
        let running = RunningClient(server, id: "metered") { $0.metrics = ClientMetrics(factory: metrics, dimensions: [("app", "tests")]) }
        var options = EngineConfiguration()
        options.changeDelivery = .immediate
        let notes = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("notes")),
                                               managerKey: "notes", persistence: nil, configuration: options)
        await running.client.waitUntilConnected()
        let reconnects = try metrics.expectCounter("tandem_client_reconnects_total", [("app", "tests")])
        let depth = try metrics.expectGauge("tandem_client_outbox_depth", [("app", "tests"), ("engine", "notes")])
        #expect(reconnects.totalValue == 0)

        // Offline, three writes wait; back online, they drain and the client counts one reconnection.
        running.client.setOnline(false)
        for id in ["a", "b", "c"] { try await notes.saveDocument(Note(id: id, text: "x")) }
        #expect(depth.lastValue == 3)
        running.client.setOnline(true)
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(depth.lastValue == 0)
        #expect(depth.values.max() == 3)
        #expect(reconnects.totalValue == 1)

        // Two writes over the document limit are refused for good: counted by code.
        let huge = String(repeating: "x", count: 2 << 20)
        try? await notes.saveDocument(Note(id: "big1", text: huge))
        try? await notes.saveDocument(Note(id: "big2", text: huge))
        #expect(await notes.waitUntil { notes.rejectedWrites.count == 2 })
        let refused = try metrics.expectCounter("tandem_client_rejected_writes_total", [("app", "tests"), ("engine", "notes"), ("code", "resource-exhausted")])
        #expect(refused.totalValue == 2)
        #expect(metrics.counters(label: "tandem_client_rejected_writes_total").map(\.totalValue).reduce(0, +) == 2)
        #expect(depth.lastValue == 0)

        // Off by default: no metrics reach the engines of a client without them.
        let plain = RunningClient(server, id: "plain")
        #expect(TandemRemoteCollectionService(client: plain.client, collection: collectionPath("notes")).metrics == nil)
        await plain.stop()
        await running.stop()
        await server.stop()
    }
}
