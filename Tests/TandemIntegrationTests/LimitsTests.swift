import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The per-user and per-connection limits of `ServerLimits`: past each, a typed error, nothing
/// written, other users unaffected.
@Suite("Limits", .timeLimit(.minutes(5)))
struct LimitsTests {
    let now = AuthenticationTests.WallClock()

    func server(_ configure: (inout SyncServerConfiguration) -> Void) async throws -> (LiveServer, BearerTokens) {
        try await AuthenticationTests.server(now: now, configure)
    }

    func token(_ tokens: BearerTokens, _ uid: String) throws -> String {
        try tokens.mint(subject: uid, now: now.withLock { $0 })
    }

    func hello(_ stream: RawStream, _ clientID: String, token: String?) async -> ServerMessage? {
        stream.send(.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: token))
        return await stream.next()
    }

    func notes(_ uid: String, _ range: Range<Int>, client: String) -> [Mutation] {
        range.map { Mutation(path: documentPath("users/\(uid)/notes/\($0)"), kind: .set(["n": .int($0)]), id: MutationID(clientID: client, sequence: UInt64($0 + 1))) }
    }

    /// An HTTP request to `server`, with a JSON body and a bearer token when given.
    func call(_ server: LiveServer, _ method: String, _ path: String, body: String? = nil, token: String? = nil) async throws -> (HTTPURLResponse, JSONValue) {
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let body { request.httpBody = Data(body.utf8) }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return (response as! HTTPURLResponse, (try? JSONText.parse(bytes: data)) ?? .null)
    }

    @Test("a connection past its write rate is answered resource-exhausted with retryAfter; TandemClient waits it out, sends again, and each write applies once")
    func clientHonoursRetryAfter() async throws {
        let (server, tokens) = try await server { $0.limits.maximumWritesPerSecond = 5 }
        let running = RunningClient(server, id: "eager") { [now] in $0.token = try? tokens.mint(subject: "ada", now: now.withLock { $0 }) }
        await running.client.waitUntilConnected()
        // Ten writes at once, in two requests: the second is over the rate, waited out on the
        // client's clock and sent again.
        let answers = await running.client.commit(requests: [WriteRequest(notes("ada", 0..<5, client: "w")), WriteRequest(notes("ada", 5..<10, client: "w"))])
        for answer in answers {
            let acknowledgements = try answer.get()
            #expect(acknowledgements.count == 5 && acknowledgements.allSatisfy { $0.status == .applied })
        }
        #expect(try await server.store.currentVersion() == 2)
        #expect(try await server.store.document(at: documentPath("users/ada/notes/9"))?.data["n"] == 9)
        await running.stop()
        await server.stop()
    }

    @Test("a user past their write rate over HTTP gets 429 with Retry-After and retryAfter, nothing written; another user goes on")
    func perUserWriteRate() async throws {
        let (server, tokens) = try await server {
            $0.limits.maximumWritesPerSecondPerUser = 3
            // Time stands still on the server: nothing refills between requests.
            $0.clock = ManualClock()
        }
        func commit(_ uid: String, _ ids: Range<Int>) async throws -> (HTTPURLResponse, JSONValue) {
            var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/commit")!)
            request.httpMethod = "POST"
            request.setValue("Bearer \(try token(tokens, uid))", forHTTPHeaderField: "Authorization")
            let writes = ids.map { #"{"op":"set","path":"users/\#(uid)/notes/\#($0)","data":{}}"# }.joined(separator: ",")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"writes":[\#(writes)]}"#.utf8)
            let (data, response) = try await URLSession.shared.data(for: request)
            return (response as! HTTPURLResponse, (try? JSONText.parse(bytes: data)) ?? .null)
        }
        #expect(try await commit("ada", 0..<3).0.statusCode == 200)
        let (refused, body) = try await commit("ada", 3..<4)
        #expect(refused.statusCode == 429 && refused.value(forHTTPHeaderField: "Retry-After") == "1")
        #expect(body[field: "error"]?[field: "code"] == "resource-exhausted" && body[field: "error"]?[field: "retryAfter"] == 334)
        #expect(try await server.store.document(at: documentPath("users/ada/notes/3")) == nil)
        #expect(try await commit("bob", 0..<3).0.statusCode == 200)
        await server.stop()
    }

    @Test("an anonymous caller past the write rate over HTTP gets 429 too, counted by its address: anonymity is no way around the limit")
    func anonymousWriteRate() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumWritesPerSecondPerUser = 3
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        func commit(_ ids: Range<Int>) async throws -> (HTTPURLResponse, JSONValue) {
            var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/commit")!)
            request.httpMethod = "POST"
            let writes = ids.map { #"{"op":"set","path":"notes/\#($0)","data":{}}"# }.joined(separator: ",")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"writes":[\#(writes)]}"#.utf8)
            let (data, response) = try await URLSession.shared.data(for: request)
            return (response as! HTTPURLResponse, (try? JSONText.parse(bytes: data)) ?? .null)
        }
        #expect(try await commit(0..<2).0.statusCode == 200)
        #expect(try await commit(2..<3).0.statusCode == 200)
        let (refused, body) = try await commit(3..<4)
        #expect(refused.statusCode == 429 && refused.value(forHTTPHeaderField: "Retry-After") == "1", "\(body)")
        #expect(body[field: "error"]?[field: "code"] == "resource-exhausted" && body[field: "error"]?[field: "message"]?.stringValue?.contains("address") == true)
        #expect(try await server.store.document(at: documentPath("notes/3")) == nil)
        await server.stop()
    }

    @Test("anonymous WebSocket connections count against their address: past the limit hello is refused, whatever client id each says, and their writes share one bucket with the address's HTTP writes")
    func anonymousConnectionsPerAddress() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumConnectionsPerAddress = 2
        configuration.limits.maximumWritesPerSecondPerUser = 3
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let streams = (0..<3).map { _ in RawStream(port: server.port) }
        guard case .welcome? = await hello(streams[0], "first", token: nil),
              case .welcome? = await hello(streams[1], "second", token: nil) else { Issue.record("expected welcome"); return }
        guard case .error(nil, let refused)? = await hello(streams[2], "third", token: nil) else { Issue.record("expected the third refused"); return }
        #expect(refused.code == .resourceExhausted && refused.message.contains("address") && refused.message.contains("2 connections"), "\(refused)")

        func write(_ stream: RawStream, id: Int, _ range: Range<Int>, client: String) async -> ServerMessage? {
            stream.send(.write(id: id, mutations: range.map { Mutation(path: documentPath("notes/\($0)"), kind: .set(["n": .int($0)]), id: MutationID(clientID: client, sequence: UInt64($0 + 1))) }))
            return await stream.next()
        }
        guard case .ack(1, _)? = await write(streams[0], id: 1, 0..<2, client: "w0"),
              case .ack(1, _)? = await write(streams[1], id: 1, 2..<3, client: "w1") else { Issue.record("expected three writes applied"); return }
        guard case .error(2, let overRate)? = await write(streams[1], id: 2, 3..<4, client: "w1") else { Issue.record("expected the fourth write refused"); return }
        #expect(overRate.code == .resourceExhausted && overRate.retryAfter != nil && overRate.message.contains("address"), "\(overRate)")
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/commit")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"writes":[{"op":"set","path":"notes/9","data":{}}]}"#.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 429, "the address's HTTP writes share the bucket")
        #expect(try await server.store.document(at: documentPath("notes/2")) != nil)
        #expect(try await server.store.document(at: documentPath("notes/3")) == nil)
        #expect(try await server.store.document(at: documentPath("notes/9")) == nil)
        for stream in streams { await stream.close() }
        await server.stop()
    }

    @Test("a user's connections past the limit are refused at hello with resource-exhausted; another user's are welcome")
    func connectionsPerUser() async throws {
        let (server, tokens) = try await server { $0.limits.maximumConnectionsPerUser = 2 }
        let streams = (0..<4).map { _ in RawStream(port: server.port) }
        guard case .welcome? = await hello(streams[0], "a1", token: try token(tokens, "ada")),
              case .welcome? = await hello(streams[1], "a2", token: try token(tokens, "ada")) else { Issue.record("expected welcome"); return }
        guard case .error(nil, let refused)? = await hello(streams[2], "a3", token: try token(tokens, "ada")) else { Issue.record("expected the third refused"); return }
        #expect(refused.code == .resourceExhausted && refused.message.contains("2 connections"))
        guard case .welcome? = await hello(streams[3], "b1", token: try token(tokens, "bob")) else { Issue.record("expected bob welcome"); return }
        for stream in streams { await stream.close() }
        await server.stop()
    }

    @Test("a connection past its message rate is answered resource-exhausted with retryAfter for each message over it, which is not acted on")
    func messageRate() async throws {
        let (server, tokens) = try await server {
            $0.limits.maximumMessagesPerSecond = 3
            $0.clock = ManualClock()
        }
        let stream = RawStream(port: server.port)
        guard case .welcome? = await hello(stream, "chatty", token: try token(tokens, "ada")) else { Issue.record("expected welcome"); return }
        stream.send(.get(id: 1, path: documentPath("users/ada/notes/1")))
        guard case .documents(1, _, _)? = await stream.next() else { Issue.record("expected the read"); return }
        stream.send(.get(id: 2, path: documentPath("users/ada/notes/1")))
        guard case .documents(2, _, _)? = await stream.next() else { Issue.record("expected the read"); return }
        stream.send(.write(id: 3, mutations: notes("ada", 0..<1, client: "w")))
        guard case .error(3, let refused)? = await stream.next() else { Issue.record("expected the write refused"); return }
        // hello and two reads took the three: a third of a second brings the next.
        #expect(refused.code == .resourceExhausted && refused.retryAfter == .milliseconds(334) && refused.message.contains("3 messages a second"))
        #expect(try await server.store.currentVersion() == 0)
        await stream.close()
        await server.stop()
    }

    @Test("a user past the HTTP read rate gets 429 with Retry-After and retryAfter on every read route, and nothing is read; another user reads on, and writes have a rate of their own")
    func httpReadRate() async throws {
        let (server, tokens) = try await server {
            $0.limits.maximumHTTPReadsPerSecondPerUser = 2
            // Time stands still on the server: nothing refills between requests.
            $0.clock = ManualClock()
        }
        let ada = try token(tokens, "ada")
        #expect(try await call(server, "GET", "/v1/documents/users/ada/notes/1", token: ada).0.statusCode == 404)
        #expect(try await call(server, "POST", "/v1/query", body: #"{"collection":"users/ada/notes"}"#, token: ada).0.statusCode == 200)
        let reads: [(method: String, path: String, body: String?)] = [
            ("GET", "/v1/documents/users/ada/notes/1", nil),
            ("POST", "/v1/query", #"{"collection":"users/ada/notes"}"#),
            ("GET", "/v1/changes?since=0&collection=users/ada/notes", nil),
            ("GET", "/v1/collections", nil),
            ("GET", "/v1/groups", nil),
        ]
        for read in reads {
            let (refused, answer) = try await call(server, read.method, read.path, body: read.body, token: ada)
            #expect(refused.statusCode == 429 && refused.value(forHTTPHeaderField: "Retry-After") == "1", "\(read.method) \(read.path): \(answer)")
            #expect(answer[field: "error"]?[field: "code"] == "resource-exhausted" && answer[field: "error"]?[field: "retryAfter"] == 500, "\(read.method) \(read.path): \(answer)")
            #expect(answer[field: "error"]?[field: "message"]?.stringValue?.contains("more than 2 reads a second") == true, "\(answer)")
        }
        let bob = try token(tokens, "bob")
        #expect(try await call(server, "GET", "/v1/documents/users/bob/notes/1", token: bob).0.statusCode == 404, "another user's reads have a bucket of their own")
        let write = #"{"writes":[{"op":"set","path":"users/ada/notes/1","data":{}}]}"#
        #expect(try await call(server, "POST", "/v1/commit", body: write, token: ada).0.statusCode == 200, "writes have a rate of their own")
        await server.stop()
    }

    @Test("an anonymous caller past the HTTP read rate gets 429 too, counted by its address; a request that reads no data is not counted")
    func anonymousHTTPReadRate() async throws {
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumHTTPReadsPerSecondPerUser = 1
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        #expect(try await call(server, "GET", "/v1/groups").0.statusCode == 200)
        let (refused, body) = try await call(server, "GET", "/v1/collections")
        #expect(refused.statusCode == 429 && refused.value(forHTTPHeaderField: "Retry-After") == "1", "\(body)")
        #expect(body[field: "error"]?[field: "message"]?.stringValue?.contains("The address 127.0.0.1") == true, "\(body)")
        #expect(try await call(server, "GET", "/health").0.statusCode == 200)
        await server.stop()
    }

    @Test("a connection's reads past its in-flight cap are refused at once with resource-exhausted and retryAfter, never reaching the store; the session goes on, and an answered read makes room")
    func readsInFlightPerConnection() async throws {
        let store = HeldReadsStore()
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumReadsInFlightPerConnection = 2
        configuration.clock = ManualClock()
        let server = try await LiveServer.start(store: store, configuration: configuration)
        let stream = RawStream(port: server.port)
        try #require(await stream.hello("reader"), "expected welcome")
        let notes = try CollectionPath("notes")
        // Four reads at once, one of each kind and another get: the store holds the first two
        // under way, so the other two find the cap reached and are answered first.
        stream.send(.get(id: 1, path: documentPath("notes/1")))
        stream.send(.query(id: 2, target: .collection(notes, Query())))
        stream.send(.fetch(id: 3, target: .collection(notes, Query()), since: .zero, limit: 10))
        stream.send(.get(id: 4, path: documentPath("notes/4")))
        guard case .error(3, let third)? = await stream.next(), case .error(4, let fourth)? = await stream.next() else {
            Issue.record("expected the third and fourth reads refused at once")
            return
        }
        for refused in [third, fourth] {
            #expect(refused.code == .resourceExhausted && refused.retryAfter == .milliseconds(250) && refused.message.contains("2 reads under way"), "\(refused)")
        }
        #expect(await store.gate.wait(until: { $0.arrived == 2 }), "the first two reads are under way in the store")
        store.gate.withLock { $0.open = true }
        var answered: Set<Int> = []
        for _ in 0..<2 {
            guard case .documents(let id, _, _)? = await stream.next() else {
                Issue.record("expected the held reads answered")
                return
            }
            answered.insert(id)
        }
        #expect(answered == [1, 2])
        // Their answers gave their room back: the next read goes.
        stream.send(.get(id: 5, path: documentPath("notes/5")))
        guard case .documents(5, _, _)? = await stream.next() else {
            Issue.record("expected the next read answered")
            return
        }
        #expect(store.gate.value.arrived == 3, "the refused reads never reached the store")
        await stream.close()
        await server.stop()
    }

    @Test("nesting past the configured depth is refused with invalid-argument over HTTP and the WebSocket, however deep, and nothing is written")
    func nestingDepth() async throws {
        let (server, tokens) = try await server { $0.limits.maximumJSONDepth = 8 }
        let token = try token(tokens, "ada")
        for depth in [9, 100_000] {
            let nested = String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)
            var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/documents/users/ada/notes/deep")!)
            request.httpMethod = "PUT"
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(nested.utf8)
            let (data, response) = try await URLSession.shared.data(for: request)
            #expect((response as! HTTPURLResponse).statusCode == 400)
            #expect((try JSONText.parse(bytes: data))[field: "error"]?[field: "message"]?.stringValue?.contains("deeper than 8") == true)
        }
        let stream = RawStream(port: server.port)
        guard case .welcome? = await hello(stream, "deep", token: token) else { Issue.record("expected welcome"); return }
        // The envelope counts: the message, its mutations and the mutation are three levels of the
        // eight, so data nesting six objects makes nine.
        let data = String(repeating: #"{"a":"#, count: 6) + "1" + String(repeating: "}", count: 6)
        stream.send(#"{"type":"write","id":1,"mutations":[{"op":"set","path":"users/ada/notes/deep","data":\#(data),"id":{"client":"w","sequence":1}}]}"#)
        guard case .error(nil, let refused)? = await stream.next() else { Issue.record("expected the message refused"); return }
        #expect(refused.code == .invalidArgument && refused.message.contains("deeper than 8"))
        // Within the depth, the same write goes.
        let shallow = String(repeating: #"{"a":"#, count: 2) + "1" + String(repeating: "}", count: 2)
        stream.send(#"{"type":"write","id":2,"mutations":[{"op":"set","path":"users/ada/notes/deep","data":\#(shallow),"id":{"client":"w","sequence":1}}]}"#)
        let answer = await stream.next()
        guard case .ack(2, _)? = answer else { Issue.record("expected the write, got \(String(describing: answer))"); return }
        #expect(try await server.store.currentVersion() == 1)
        await stream.close()
        await server.stop()
    }
}
