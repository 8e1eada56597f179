import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import Testing
import WSClient
import TandemCore
import TandemServer
import TandemTesting

/// Every kind of bad input gets its stable code, nothing is partly written, and the connection stays
/// usable where the protocol allows.
@Suite("Bad input")
struct BadInputTests {
    static let big = String(repeating: "x", count: (1 << 20) + 10)

    func expectError(_ message: ServerMessage?, id: Int?, _ code: TandemError.Code, _ fragment: String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .error(let answered, let error) = message else {
            Issue.record("expected an error frame, got \(String(describing: message))", sourceLocation: sourceLocation)
            return
        }
        #expect(answered == id, sourceLocation: sourceLocation)
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(fragment.isEmpty || error.message.contains(fragment), "\(error.message)", sourceLocation: sourceLocation)
    }

    @Test("over the WebSocket: each bad message gets an error frame and the session goes on")
    func webSocket() async throws {
        let server = try await LiveServer.start()
        let stream = RawStream(port: server.port)

        stream.send(#"{"type":"get","id":1,"path":"a/b"}"#)
        expectError(await stream.next(), id: 1, .failedPrecondition, "hello")
        stream.send(.hello(clientID: "raw", protocolVersion: 99, token: nil))
        expectError(await stream.next(), id: nil, .failedPrecondition, "protocol")
        try #require(await stream.hello("raw"), "expected welcome")

        stream.send("{not json")
        expectError(await stream.next(), id: nil, .invalidArgument, "not valid JSON")
        stream.send(#"{"type":"frobnicate","id":2}"#)
        expectError(await stream.next(), id: 2, .invalidArgument, "Unknown message type")
        stream.send(#"{"type":"get","id":3,"path":"users"}"#)
        expectError(await stream.next(), id: 3, .invalidArgument, "names a collection")
        stream.send(#"{"type":"write","id":4,"mutations":[{"op":"set","path":"a/b","data":"text"}]}"#)
        expectError(await stream.next(), id: 4, .invalidArgument, "must be a JSON object")
        stream.send(#"{"type":"write","id":5,"mutations":[{"op":"update","path":"a/b","fields":{"n":{"$increment":"one"}}}]}"#)
        expectError(await stream.next(), id: 5, .invalidArgument, "needs a number")
        // Written, then refused: protocol 2 answers each mutation with its status.
        stream.send(.write(id: 6, mutations: [.set(documentPath("a/ok"), ["n": 1]), .set(documentPath("a/big"), ["s": .string(Self.big)])]))
        expectRefused(await stream.next(), id: 6, .resourceExhausted, "bytes")
        // Never looked at: an error frame.
        stream.send(.write(id: 7, mutations: (0...500).map { .set(documentPath("a/\($0)"), [:]) }))
        expectError(await stream.next(), id: 7, .resourceExhausted, "500")
        stream.send(.write(id: 8, mutations: [Mutation.set(documentPath("a/ok"), [:]).requiring(.exists(true))]))
        expectRefused(await stream.next(), id: 8, .failedPrecondition, "must exist")
        stream.send(.write(id: 9, mutations: [.update(documentPath("a/none"), fields: ["n": 1])]))
        expectRefused(await stream.next(), id: 9, .notFound)
        stream.send(.write(id: 13, mutations: [Mutation.set(documentPath("a/x"), [:]).identified(by: MutationID(clientID: "raw", sequence: 1)),
                                                Mutation.set(documentPath("a/y"), [:]).identified(by: MutationID(clientID: "raw", sequence: 1))]))
        expectError(await stream.next(), id: 13, .invalidArgument, "appears twice")
        stream.send(#"{"type":"write","id":14,"mutations":[{"op":"set","path":"a/n","data":{"n":1e999}}]}"#)
        expectError(await stream.next(), id: nil, .invalidArgument, "64-bit double")
        stream.send(#"{"type":"write","id":15,"mutations":[{"op":"set","path":"a/n","data":{"n":123456789012345678901234567890}}]}"#)
        expectError(await stream.next(), id: nil, .invalidArgument, "64 bits")
        stream.sendBytes(Array(#"{"type":"write","id":16,"mutations":[{"op":"set","path":"a/n","data":{"s":"caf"#.utf8) + [0xC3, 0x28] + Array(#""}}]}"#.utf8))
        expectError(await stream.next(), id: nil, .invalidArgument, "UTF-8")
        stream.send(.hello(clientID: "other", protocolVersion: TandemVersion.wireProtocol, token: nil))
        expectError(await stream.next(), id: nil, .failedPrecondition, "already said hello")
        stream.send(#"{"type":"listen","id":10,"target":{"collection":"a","query":[{"limitToLast":2}]}}"#)
        expectError(await stream.next(), id: 10, .invalidArgument, "order")
        stream.sendBinary([1, 2, 3])
        expectError(await stream.next(), id: nil, .invalidArgument, "text frames")
        #expect(try await server.store.currentVersion() == 0)  // nothing was partly written

        // Still usable.
        stream.send(.write(id: 11, mutations: [.set(documentPath("a/ok"), ["n": 1])]))
        guard case .ack(11, let acknowledgements)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(acknowledgements.first?.version == 1)
        stream.send(.heartbeat)
        stream.send(.get(id: 12, path: documentPath("a/ok")))
        guard case .documents(12, let documents, _)? = await stream.next() else { Issue.record("expected documents"); return }
        #expect(documents.first?.data == ["n": 1])
        await stream.close()

        // Protocol 1 still works, and answers a refused write with an error frame.
        let old = RawStream(port: server.port)
        old.send(.hello(clientID: "old", protocolVersion: 1, token: nil))
        guard case .welcome(1, _, _, _)? = await old.next() else { Issue.record("expected welcome for protocol 1"); return }
        old.send(.write(id: 1, mutations: [.update(documentPath("a/none"), fields: ["n": 1])]))
        expectError(await old.next(), id: 1, .notFound)
        await old.close()
        await server.stop()
    }

    /// An acknowledgement whose mutations were all refused with `code`, as protocol 2 answers a refused write.
    func expectRefused(_ message: ServerMessage?, id: Int, _ code: TandemError.Code, _ fragment: String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .ack(id, let results)? = message, !results.isEmpty else {
            Issue.record("expected an ack of \(id) refusing its writes, got \(String(describing: message))", sourceLocation: sourceLocation)
            return
        }
        for result in results {
            #expect(result.status == .refused && result.error?.code == code, "\(result)", sourceLocation: sourceLocation)
            #expect(fragment.isEmpty || result.error?.message.contains(fragment) == true, "\(String(describing: result.error))", sourceLocation: sourceLocation)
        }
    }

    func call(_ server: LiveServer, _ method: String, _ path: String, body: String? = nil) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        if let body { request.httpBody = Data(body.utf8) }
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        return (status, (try? JSONText.parse(bytes: data)) ?? .null)
    }

    func code(_ body: JSONValue) -> String? {
        body[field: "error"]?[field: "code"]?.stringValue
    }

    @Test("over HTTP: each bad request gets a 4xx with its code and writes nothing")
    func http() async throws {
        let server = try await LiveServer.start()
        var (status, body) = try await call(server, "PUT", "/v1/documents/a/b", body: "{oops")
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "GET", "/v1/documents/users")
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "PUT", "/v1/documents/a/b", body: "[1, 2]")
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "PATCH", "/v1/documents/a/b", body: #"{"n": {"$increment": "x"}}"#)
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "PUT", "/v1/documents/a/big", body: JSONText.encode(["s": .string(Self.big)]))
        #expect(status == 413 && code(body) == "resource-exhausted")
        let many = JSONText.encode(["writes": .array((0...500).map { Mutation.set(documentPath("a/\($0)"), [:]).wireValue })])
        (status, body) = try await call(server, "POST", "/v1/commit", body: many)
        #expect(status == 413 && code(body) == "resource-exhausted")
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection": "a", "query": [{"where": "n", "op": "~", "value": 1}]}"#)
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "GET", "/v1/changes?since=yesterday")
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "GET", "/v1/documents/a/missing")
        #expect(status == 404 && code(body) == "not-found")
        (status, body) = try await call(server, "PUT", "/v1/documents/a/b?exists=true", body: "{}")
        #expect(status == 412 && code(body) == "failed-precondition")
        // Two preconditions, one of them malformed: refused (the malformed one was ignored, and the
        // delete applied, found by the schema-driven fuzz).
        (status, body) = try await call(server, "DELETE", "/v1/documents/a/b?exists=false&version=false")
        #expect(status == 400 && code(body) == "invalid-argument")
        (status, body) = try await call(server, "DELETE", "/v1/documents/a/b?exists=false&version=0")
        #expect(status == 400 && code(body) == "invalid-argument", "one precondition a write")
        // Over 2^63 is no integer to the server, nor to its description.
        (status, body) = try await call(server, "GET", "/v1/changes?since=99999999999999999999")
        #expect(status == 400 && code(body) == "invalid-argument")
        #expect(try await server.store.currentVersion() == 0)

        // And the good path: a transform, a precondition, the change feed.
        (status, body) = try await call(server, "PUT", "/v1/documents/a/b", body: #"{"n": {"$increment": 2}, "tags": {"$arrayUnion": ["x"]}}"#)
        #expect(status == 200 && body[field: "data"] == ["n": 2, "tags": ["x"]] && body[field: "version"] == 1)
        (status, body) = try await call(server, "PATCH", "/v1/documents/a/b?version=1", body: #"{"n": {"$increment": 1}, "tags": {"$delete": true}}"#)
        #expect(status == 200 && body[field: "data"] == ["n": 3])
        (status, body) = try await call(server, "GET", "/v1/changes?since=0&limit=1")
        #expect(status == 200 && body[field: "hasMore"] == false && body[field: "changes"]?.arrayValue?.count == 1)
        // A commit through /v1/commit, a query, a delete; then the feed comes in pages.
        (status, body) = try await call(server, "POST", "/v1/commit", body: #"{"writes": [{"op": "set", "path": "a/c", "data": {"n": 7}}, {"op": "set", "path": "a/d", "data": {"n": 8}}]}"#)
        #expect(status == 200 && body[field: "version"] == 3 && body[field: "results"]?.arrayValue?.count == 2)
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection": "a", "query": [{"where": "n", "op": ">", "value": 5}]}"#)
        #expect(status == 200 && body[field: "documents"]?.arrayValue?.compactMap { $0[field: "path"]?.stringValue } == ["a/c", "a/d"])
        (status, body) = try await call(server, "DELETE", "/v1/documents/a/d")
        #expect(status == 200 && body[field: "version"] == 4)
        (status, body) = try await call(server, "GET", "/v1/changes?since=0&limit=1")
        #expect(status == 200 && body[field: "hasMore"] == true && body[field: "version"] == 2 && body[field: "changes"]?.arrayValue?.count == 1)
        (status, body) = try await call(server, "GET", "/v1/changes?since=2&limit=1")
        #expect(status == 200 && body[field: "hasMore"] == true && body[field: "version"] == 3 && body[field: "changes"]?.arrayValue?.count == 1)
        (status, body) = try await call(server, "GET", "/v1/changes?since=3&limit=10")
        #expect(status == 200 && body[field: "hasMore"] == false && body[field: "version"] == 4)
        #expect(body[field: "changes"]?.arrayValue?.first?[field: "document"] == .null)
        (status, body) = try await call(server, "GET", "/health")
        #expect(status == 200 && body[field: "status"] == "ok")
        await server.stop()
    }

    @Test("the server answers a heartbeat, and closes a connection silent for three heartbeat intervals on its clock: at that very point, not before")
    func serverHeartbeats() async throws {
        let clock = ManualClock()
        var configuration = SyncServerConfiguration()
        configuration.heartbeatInterval = .seconds(10)
        configuration.clock = clock
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("quiet"), "expected welcome")
        // The watchdog sleeps until the earliest deadline: the session's, 30 s after its hello.
        func sleeps(until seconds: Int) async {
            await clock.waitForSleepers { $0.contains(.init(offset: .seconds(seconds))) }
        }
        await sleeps(until: 30)
        clock.advance(to: .init(offset: .seconds(20)))
        stream.send(.heartbeat)
        #expect(await stream.next(heartbeats: true) == .heartbeat)
        // Heard at 20: at 30 it is not due, and the watchdog sleeps until 50.
        clock.advance(to: .init(offset: .seconds(30)))
        await sleeps(until: 50)
        clock.advance(to: .init(offset: .seconds(40)))
        stream.send(.get(id: 1, path: documentPath("a/b")))
        guard case .documents(1, _, _)? = await stream.next() else { Issue.record("expected the session open at 40 s"); return }
        // Heard at 40: open at 50, due at exactly 70.
        clock.advance(to: .init(offset: .seconds(50)))
        await sleeps(until: 70)
        clock.advance(to: .init(offset: .seconds(70)))
        #expect(await stream.next(heartbeats: true) == nil)
        await stream.close()
        await server.stop()
    }

    @Test("a message up to the request limit is taken in one frame; a longer one is refused and the session goes on; a long answer comes in frames of 1 MiB")
    func frames() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumRequestBytes = 3 << 20
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("big"), "expected welcome")
        // 2.7 MB in one frame (most libraries send a message so), under the 3 MiB limit: taken.
        let body = String(repeating: "y", count: 900_000)
        let write = ClientMessage.write(id: 1, mutations: (0..<3).map { .set(documentPath("big/\($0)"), ["s": .string(body)]) })
        stream.sendBytes(Array(write.text.utf8))
        guard case .ack(1, let results)? = await stream.next() else { Issue.record("expected the write acknowledged"); return }
        #expect(results.allSatisfy { $0.status == .applied })
        // Over the limit, in three frames: refused whole, and the session goes on.
        let over = Array(repeating: UInt8(ascii: " "), count: (3 << 20) + 10)
        stream.sendFragments([Array(#"{"type":"heartbeat""#.utf8), over, Array("}".utf8)])
        expectError(await stream.next(), id: nil, .resourceExhausted, "bytes")
        // The answer to a query of the 2.7 MB reaches this client, whose frames are at most 1 MiB.
        stream.send(.query(id: 2, target: .collection(collectionPath("big"), Query())))
        guard case .documents(2, let documents, _)? = await stream.next() else { Issue.record("expected the documents"); return }
        #expect(documents.count == 3 && documents.allSatisfy { $0.data["s"] == .string(body) })
        await stream.close()
        await server.stop()
    }

    @Test("a listener resuming from beyond the server's version gets a reset snapshot, and a get's version covers its document")
    func versionsOnTheWire() async throws {
        let server = try await LiveServer.start()
        _ = try await server.store.commit([.set(documentPath("a/1"), ["n": 1])])
        _ = try await server.store.commit([.set(documentPath("a/2"), ["n": 2])])
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("resumer"), "expected welcome")
        // From another server's history (a restored backup, say): never silence.
        stream.send(.listen(id: 1, target: .collection(collectionPath("a"), Query()), resumeFrom: 999))
        guard case .batch(1, let batch, true, false)? = await stream.next() else { Issue.record("expected a reset snapshot"); return }
        #expect(batch.isSnapshot && batch.changes.count == 2 && batch.version == 2)
        // Live from there: the next commit arrives.
        _ = try await server.store.commit([.set(documentPath("a/3"), ["n": 3])])
        guard case .batch(1, let next, false, false)? = await stream.next() else { Issue.record("expected the next commit"); return }
        #expect(next.version == 3 && next.changes.map(\.path.id) == ["3"])
        stream.send(.get(id: 2, path: documentPath("a/3")))
        guard case .documents(2, let documents, let version)? = await stream.next() else { Issue.record("expected documents"); return }
        #expect(documents.first?.version == 3 && version >= 3)
        await stream.close()
        await server.stop()
    }

    @Test("past the listeners a connection may run, a listen is resource-exhausted; unlisten frees a place")
    func listenerLimit() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumListenersPerConnection = 2
        let server = try await LiveServer.start(configuration: configuration)
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("many"), "expected welcome")
        for id in 1...2 {
            stream.send(.listen(id: id, target: .document(documentPath("a/\(id)")), resumeFrom: nil))
            guard case .batch(id, _, _, _)? = await stream.next() else { Issue.record("expected a snapshot"); return }
        }
        stream.send(.listen(id: 3, target: .document(documentPath("a/3")), resumeFrom: nil))
        expectError(await stream.next(), id: 3, .resourceExhausted, "listeners")
        stream.send(.unlisten(id: 1))
        stream.send(.listen(id: 4, target: .document(documentPath("a/4")), resumeFrom: nil))
        guard case .batch(4, _, _, _)? = await stream.next() else { Issue.record("expected a snapshot"); return }
        // An id in use is refused without naming it (that would end the running listener), and
        // the running one goes on.
        stream.send(.listen(id: 2, target: .document(documentPath("a/other")), resumeFrom: nil))
        expectError(await stream.next(), id: nil, .invalidArgument, "already running")
        // A listen and an unlisten back to back: the unlisten finds it, whatever its load is
        // doing, so its place is free for the next at once, and no commit reaches it.
        stream.send(.unlisten(id: 4))
        stream.send(.listen(id: 5, target: .document(documentPath("a/5")), resumeFrom: nil))
        stream.send(.unlisten(id: 5))
        stream.send(.listen(id: 6, target: .document(documentPath("a/6")), resumeFrom: nil))
        stream.send(.write(id: 7, mutations: [.set(documentPath("a/5"), ["n": 1]), .set(documentPath("a/6"), ["n": 1]), .set(documentPath("a/2"), ["n": 1])]))
        var live: Set<Int> = []
        var acknowledged = false
        while !acknowledged || live != [2, 6] {
            switch await stream.next() {
            case .batch(let target, let batch, _, _)?:
                if batch.isSnapshot {
                    #expect(target == 5 || target == 6, "an unexpected snapshot for \(target)")
                } else {
                    #expect(target != 5, "a stopped listener got a commit")
                }
                // The write comes to 6 as a change, or in its snapshot when its load ran after
                // the commit.
                let written = batch.changes.contains { $0.path.id == String(target) && $0.document?.data["n"] == 1 }
                if target != 5, written { live.insert(target) }
            case .ack(7, _)?:
                acknowledged = true
            case let other:
                Issue.record("unexpected \(String(describing: other)); listeners that saw the write: \(live), acknowledged: \(acknowledged)")
                return
            }
        }
        await stream.close()
        await server.stop()
    }

    @Test("past the per-connection write rate, writes are refused as resource-exhausted with retryAfter, and nothing is written")
    func writeRate() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumWritesPerSecond = 5
        // Time stands still: the second request comes within the same second however slow the machine.
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(configuration: configuration)
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("fast"), "expected welcome")
        stream.send(.write(id: 1, mutations: (0..<5).map { .set(documentPath("a/\($0)"), [:]) }))
        // A second's worth again, with no time passed on the server's clock: refused.
        stream.send(.write(id: 2, mutations: (0..<4).map { .set(documentPath("a/late\($0)"), [:]) } + [.set(documentPath("a/late"), [:])]))
        // Answers are matched by id: the refusal, decided on arrival, may come first.
        var answers: [Int: ServerMessage] = [:]
        for _ in 0..<2 {
            switch await stream.next() {
            case .ack(let id, _)?: answers[id] = .ack(id: id, acknowledgements: [])
            case .error(let id?, let error)?: answers[id] = .error(id: id, error)
            case let other: Issue.record("unexpected \(String(describing: other))")
            }
        }
        guard case .ack? = answers[1] else { Issue.record("expected the first batch to pass"); return }
        expectError(answers[2], id: 2, .resourceExhausted, "writes a second")
        // Nothing passed on the clock: a whole second's worth is missing.
        if case .error(_, let error)? = answers[2] { #expect(error.retryAfter == .seconds(1)) }
        #expect(try await server.store.document(at: documentPath("a/late")) == nil)
        #expect(try await server.store.currentVersion() == 1)
        await stream.close()
        await server.stop()
    }
}

@Suite("Slow consumers", .timeLimit(.minutes(5)))
struct SlowConsumerTests {
    @Test("a client that stops reading is disconnected instead of buffered without bound")
    func slowConsumer() async throws {
        var configuration = SyncServerConfiguration()
        configuration.maximumQueuedBytesPerConnection = 256 << 10
        let server = try await LiveServer.start(configuration: configuration)
        // A client that says hello, listens, and then never reads again.
        let gate = Exit()
        var logger = Logger(label: "slow")
        logger.logLevel = .critical
        // Frames as large as the server sends: a smaller limit would have the client close the
        // connection itself, which is not what is tested.
        let client = WebSocketClient(url: "ws://127.0.0.1:\(server.port)/v1/stream", configuration: .init(maxFrameSize: 1 << 24), logger: logger) { _, outbound, _ in
            try await outbound.writeTextMessage(ClientMessage.hello(clientID: "slow", protocolVersion: TandemVersion.wireProtocol, token: nil).text)
            try await outbound.writeTextMessage(ClientMessage.listen(id: 1, target: .collection(collectionPath("big"), Query()), resumeFrom: nil).text)
            _ = await gate.wait()
        }
        let task = Task { try await client.run() }
        await server.waitForListeners(count: 1)
        #expect(try await MetricsTests.scrape(server)["tandem_listeners"] == 1)
        let big = String(repeating: "x", count: 200_000)
        for index in 0..<150 {
            _ = try await server.store.commit([.set(documentPath("big/\(index)"), ["s": .string(big)])])
            if server.listenerCount == 0 { break }
        }
        // The server dropped the slow connection, and its listener with it.
        await server.waitForListeners(count: 0)
        let after = try await MetricsTests.scrape(server)
        #expect(after["tandem_listeners"] == 0)
        #expect(after["tandem_slow_consumers_disconnected_total"] == 1)
        gate.fire(0)
        task.cancel()
        await server.stop()
    }
}
