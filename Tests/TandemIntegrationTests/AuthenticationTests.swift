import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// A server started with an auth secret: bearer tokens over HTTP and in the WebSocket hello, the
/// default policy (each user reaches `users/{uid}` and below), and client ids bound to users.
@Suite("Authentication", .timeLimit(.minutes(5)))
struct AuthenticationTests {
    static let secret = "the-test-secret-that-is-long-enough"
    /// The server's wall clock, moved by the tests.
    final class WallClock: Sendable {
        private let date = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
        func withLock<R>(_ body: (inout Date) -> R) -> R { date.withLock { body(&$0) } }
    }
    let now = WallClock()

    func server() async throws -> (LiveServer, BearerTokens) {
        try await Self.server(now: now)
    }

    /// A live server with the test secret and the default policy, on the wall clock `now`.
    static func server(now: WallClock, _ configure: (inout SyncServerConfiguration) -> Void = { _ in }) async throws -> (LiveServer, BearerTokens) {
        let tokens = try await BearerTokens(secret: secret)
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens, now: { now.withLock { $0 } })
        configure(&configuration)
        return (try await LiveServer.start(configuration: configuration), tokens)
    }

    func token(_ tokens: BearerTokens, _ uid: String, claims: JSONObject = [:], lifetime: Duration = .seconds(3600)) throws -> String {
        try tokens.mint(subject: uid, lifetime: lifetime, claims: claims, now: now.withLock { $0 })
    }

    func call(_ server: LiveServer, _ method: String, _ path: String, body: String? = nil, token: String? = nil, authorization: String? = nil) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        if let body { request.httpBody = Data(body.utf8) }
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let authorization { request.setValue(authorization, forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONText.parse(bytes: data)) ?? .null)
    }

    func error(_ body: JSONValue) -> (code: String?, message: String, reason: String?) {
        (body[field: "error"]?[field: "code"]?.stringValue, body[field: "error"]?[field: "message"]?.stringValue ?? "", body[field: "error"]?[field: "reason"]?.stringValue)
    }

    @Test("tokens: minted and verified with their claims; expired, early, tampered, unsigned and malformed ones refused, each saying why")
    func tokens() async throws {
        let tokens = try await BearerTokens(secret: Self.secret)
        let issued = Date(timeIntervalSince1970: 1_800_000_000)
        let token = try tokens.mint(subject: "ada", lifetime: .seconds(60), claims: ["role": "editor"], now: issued)
        let user = try tokens.verify(token, now: issued.addingTimeInterval(59))
        #expect(user.uid == "ada" && user.claims["role"] == "editor" && user.expiresAt == issued.addingTimeInterval(60))

        func refusal(_ token: String, at time: Date = issued) -> TandemError? {
            do {
                _ = try tokens.verify(token, now: time)
                return nil
            } catch {
                return error
            }
        }
        let expired = refusal(token, at: issued.addingTimeInterval(60))
        #expect(expired?.code == .unauthenticated && expired?.reason == TandemError.tokenExpired && expired?.message.contains("expired") == true)
        let other = try await BearerTokens(secret: "another-secret-that-is-also-long-enough")
        let forged = refusal(try other.mint(subject: "ada", now: issued))
        #expect(forged?.code == .unauthenticated && forged?.message.contains("signature") == true && forged?.reason == nil)
        #expect(forged?.message.contains(Self.secret) == false)
        let parts = token.split(separator: ".")
        let tampered = refusal("\(parts[0]).\(Base64URL.encode(Array(#"{"sub":"root"}"#.utf8))).\(parts[2])")
        #expect(tampered?.message.contains("signature") == true)
        let unsigned = refusal("\(Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))).\(parts[1]).")
        #expect(unsigned?.code == .unauthenticated && unsigned?.message.contains("HS256") == true)
        #expect(refusal("not-a-token")?.message.contains("three parts") == true)
        #expect(refusal("a.b.c")?.message.contains("malformed") == true)
        #expect(refusal(String(repeating: "a", count: 10_000))?.message.contains("malformed") == true)
        let early = refusal(try tokens.mint(subject: "ada", claims: ["nbf": .int(Int(issued.timeIntervalSince1970) + 100)], now: issued))
        #expect(early?.message.contains("not valid before") == true)
        let noSubject = try tokens.sign(["name": "nobody"])
        #expect(refusal(noSubject)?.message.contains("sub") == true)
        let badExpiry = try tokens.mint(subject: "ada", lifetime: nil, claims: ["exp": "tomorrow"], now: issued)
        #expect(refusal(badExpiry)?.message.contains("exp") == true)
        await #expect(throws: TandemError.self) { try await BearerTokens(secret: "") }
        await #expect(throws: TandemError.self) { try await BearerTokens(secret: String(repeating: "k", count: 31)) }
    }

    @Test("over HTTP: no token, a bad one, an expired one and another user's are refused with their codes; the owner reads and writes; nothing refused is written")
    func http() async throws {
        let (server, tokens) = try await server()
        let ada = try token(tokens, "ada")
        let bob = try token(tokens, "bob")

        var (status, body) = try await call(server, "PUT", "/v1/documents/users/ada/notes/1", body: #"{"text":"hi"}"#)
        #expect(status == 401 && error(body).code == "unauthenticated" && error(body).message.contains("bearer token"))
        (status, body) = try await call(server, "PUT", "/v1/documents/users/ada/notes/1", body: #"{"text":"hi"}"#, token: ada)
        #expect(status == 200, "\(body)")
        (status, body) = try await call(server, "GET", "/v1/documents/users/ada/notes/1", token: ada)
        #expect(status == 200 && body[field: "data"]?[field: "text"] == "hi")
        (status, body) = try await call(server, "GET", "/v1/documents/users/ada", token: ada)
        #expect(status == 404, "the user's own document is theirs to read")

        (status, body) = try await call(server, "GET", "/v1/documents/users/ada/notes/1", token: bob)
        #expect(status == 403 && error(body).code == "permission-denied")
        (status, body) = try await call(server, "PUT", "/v1/documents/users/ada/notes/2", body: #"{"text":"mine now"}"#, token: bob)
        #expect(status == 403 && error(body).code == "permission-denied")
        (status, body) = try await call(server, "GET", "/v1/documents/users/ada/notes/1", authorization: "Basic YWRhOnB3")
        #expect(status == 401 && error(body).message.contains("Bearer"))
        (status, body) = try await call(server, "GET", "/v1/documents/users/ada/notes/1", token: try await BearerTokens(secret: "a-guess-at-the-secret-of-this-server").mint(subject: "ada"))
        #expect(status == 401 && error(body).message.contains("signature"))
        let expired = try token(tokens, "ada", lifetime: .seconds(1))
        now.withLock { $0 += 2 }
        (status, body) = try await call(server, "GET", "/v1/documents/users/ada/notes/1", token: expired)
        #expect(status == 401 && error(body).reason == TandemError.tokenExpired)

        // Queries: the owner's collection only; a collection group could return anyone's.
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection":"users/ada/notes"}"#, token: ada)
        #expect(status == 200 && body[field: "documents"]?.arrayValue?.count == 1, "\(body)")
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection":"users/ada/notes"}"#, token: bob)
        #expect(status == 403)
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"group":"notes"}"#, token: ada)
        #expect(status == 403)

        // A batch with one forbidden write is refused whole.
        (status, body) = try await call(server, "POST", "/v1/commit", body: #"{"writes":[{"op":"set","path":"users/bob/notes/1","data":{"a":1}},{"op":"set","path":"users/ada/notes/9","data":{"a":1}}]}"#, token: bob)
        #expect(status == 403 && error(body).message.contains("users/ada/notes/9"))
        (status, body) = try await call(server, "GET", "/v1/documents/users/bob/notes/1", token: bob)
        #expect(status == 404, "nothing of the refused batch was written")

        // The whole change feed: operators only.
        (status, body) = try await call(server, "GET", "/v1/changes?since=0", token: ada)
        #expect(status == 403)
        (status, body) = try await call(server, "GET", "/v1/changes?since=0", token: try token(tokens, "ops", claims: ["admin": true]))
        #expect(status == 200 && body[field: "changes"]?.arrayValue?.count == 1)
        await server.stop()
    }

    @Test("over the WebSocket: hello with a token; a refused hello can be said again; reads, listens and writes follow the policy")
    func webSocket() async throws {
        let (server, tokens) = try await server()
        let stream = RawStream(port: server.port)
        let hello = { (token: String?) in ClientMessage.hello(clientID: "ada-phone", protocolVersion: TandemVersion.wireProtocol, token: token) }

        stream.send(hello("garbage"))
        guard case .error(nil, let refused)? = await stream.next() else { Issue.record("expected the hello refused"); return }
        #expect(refused.code == .unauthenticated && refused.message.contains("malformed"))
        stream.send(hello(try token(tokens, "ada")))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }

        let notes = try CollectionPath("users/ada/notes")
        stream.send(.write(id: 1, mutations: [.set(try notes.document("1"), ["text": "hi"])]))
        guard case .ack(1, _)? = await stream.next() else { Issue.record("expected the write acknowledged"); return }
        stream.send(.write(id: 2, mutations: [.set(try DocumentPath("users/bob/notes/1"), ["text": "hi"])]))
        // Decided inside the commit, against the documents: refused like a failed precondition.
        guard case .ack(2, let denied)? = await stream.next() else { Issue.record("expected the write refused"); return }
        #expect(denied.map(\.status) == [.refused] && denied.first?.error?.code == .permissionDenied)
        stream.send(.listen(id: 3, target: .collection(try CollectionPath("users/bob/notes"), Query()), resumeFrom: nil))
        guard case .error(3, let listenDenied)? = await stream.next() else { Issue.record("expected the listen refused"); return }
        #expect(listenDenied.code == .permissionDenied)
        stream.send(.listen(id: 4, target: .collection(notes, Query()), resumeFrom: nil))
        guard case .batch(4, let batch, _, _)? = await stream.next() else { Issue.record("expected the snapshot"); return }
        #expect(batch.changes.count == 1)
        await stream.close()

        // Without a token the connection is anonymous: whatever needs a user is unauthenticated.
        let anonymous = RawStream(port: server.port)
        try #require(await anonymous.hello("anon"))
        anonymous.send(.get(id: 1, path: try notes.document("1")))
        guard case .error(1, let unauthenticated)? = await anonymous.next() else { Issue.record("expected the read refused"); return }
        #expect(unauthenticated.code == .unauthenticated)
        await anonymous.close()
        await server.stop()
    }

    @Test("a client id is a device, not an identity: two users may say it, and neither may write under the other's writer ids")
    func clientIDIsADevice() async throws {
        let (server, tokens) = try await server()
        let ada = RawStream(port: server.port)
        ada.send(.hello(clientID: "shared-id", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "ada")))
        guard case .welcome? = await ada.next() else { Issue.record("expected welcome"); return }
        let bob = RawStream(port: server.port)
        bob.send(.hello(clientID: "shared-id", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "bob")))
        guard case .welcome? = await bob.next() else { Issue.record("expected bob welcome on the same device id"); return }
        // Ada writes under her writer id; Bob, on the same device id, may not use it.
        let writer = MutationID(clientID: "shared-id/notes", sequence: 1)
        ada.send(.write(id: 1, mutations: [Mutation.set(try DocumentPath("users/ada/notes/1"), ["text": "ada"]).identified(by: writer)]))
        guard case .ack(1, let adas)? = await ada.next() else { Issue.record("expected ada's ack"); return }
        #expect(adas.map(\.status) == [.applied])
        bob.send(.write(id: 1, mutations: [Mutation.set(try DocumentPath("users/bob/notes/1"), ["text": "bob"]).identified(by: MutationID(clientID: "shared-id/notes", sequence: 2))]))
        guard case .error(1, let denied)? = await bob.next() else { Issue.record("expected bob refused the writer id"); return }
        #expect(denied.code == .permissionDenied)
        // Ada on another device keeps writing under her writer id (a device that lost its id keeps its queue).
        let adaElsewhere = RawStream(port: server.port)
        adaElsewhere.send(.hello(clientID: "new-install", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "ada")))
        guard case .welcome? = await adaElsewhere.next() else { Issue.record("expected welcome"); return }
        adaElsewhere.send(.write(id: 1, mutations: [Mutation.set(try DocumentPath("users/ada/notes/2"), ["text": "again"]).identified(by: MutationID(clientID: "shared-id/notes", sequence: 3))]))
        guard case .ack(1, let again)? = await adaElsewhere.next() else { Issue.record("expected ada's second ack"); return }
        #expect(again.map(\.status) == [.applied])
        // Anonymous on the same device id is another principal too.
        let anonymous = RawStream(port: server.port)
        #expect(await anonymous.hello("shared-id"))
        await ada.close()
        await bob.close()
        await adaElsewhere.close()
        await anonymous.close()
        await server.stop()
    }

    @Test("an anonymous connection whose client id spells a user's owner cannot write under that user's writer ids: the user's queue goes on")
    func anonymousCannotClaimAUsersWriterIDs() async throws {
        let rules = """
        rules:
          - match: users/{uid}/{rest=**}
            read: auth.uid == uid
            write: auth.uid == uid
          - match: guestbook/{doc}
            read: true
            write: true
        """
        let (server, tokens) = try await Self.server(now: now) { configuration in
            configuration.access = AccessControl(tokens: configuration.access?.tokens, rules: try! AccessRules(parsing: rules), now: { self.now.withLock { $0 } })
        }
        let ada = RawStream(port: server.port)
        ada.send(.hello(clientID: "ada-phone", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "ada")))
        guard case .welcome? = await ada.next() else { Issue.record("expected welcome"); return }
        let writer = "W-ada"
        ada.send(.write(id: 1, mutations: [Mutation.set(try DocumentPath("users/ada/notes/1"), ["n": 1]).identified(by: MutationID(clientID: writer, sequence: 1))]))
        guard case .ack(1, let first)? = await ada.next() else { Issue.record("expected ada's ack"); return }
        #expect(first.map(\.status) == [.applied])

        // An anonymous caller learns her writer id and says hello as her owner ("u3:ada").
        let intruder = RawStream(port: server.port)
        #expect(await intruder.hello("u3:ada"))
        intruder.send(.write(id: 1, mutations: [Mutation.set(try DocumentPath("guestbook/x"), ["pwned": true]).identified(by: MutationID(clientID: writer, sequence: 1_000_000))]))
        guard case .error(1, let denied)? = await intruder.next() else { Issue.record("expected the intruder refused the writer id"); return }
        #expect(denied.code == .permissionDenied)
        // It names no owner and no sequence of anyone's.
        #expect(!denied.message.contains("1000000") && !denied.message.contains("u3:"))

        // Ada's next write under her writer id is applied, not refused as out of order.
        ada.send(.write(id: 2, mutations: [Mutation.set(try DocumentPath("users/ada/notes/2"), ["n": 2]).identified(by: MutationID(clientID: writer, sequence: 2))]))
        guard case .ack(2, let second)? = await ada.next() else { Issue.record("expected ada's second ack"); return }
        #expect(second.map(\.status) == [.applied])
        let (status, _) = try await call(server, "GET", "/v1/documents/guestbook/x")
        #expect(status == 404)
        await ada.close()
        await intruder.close()
        await server.stop()
    }

    @Test("a silent connection whose token expires is told at exp, on the server's clock, and its listeners stop there and then")
    func expiryOfASilentConnection() async throws {
        let clock = ManualClock()
        let (server, tokens) = try await Self.server(now: now) { configuration in
            configuration.clock = clock
            // Silence would close it at 300 s: the expiry at 60 s comes first.
            configuration.heartbeatInterval = .seconds(100)
        }
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "c", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "ada", lifetime: .seconds(60))))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        stream.send(.listen(id: 1, target: .collection(try CollectionPath("users/ada/notes"), Query()), resumeFrom: nil))
        guard case .batch(1, _, _, _)? = await stream.next() else { Issue.record("expected the snapshot"); return }
        await server.waitForListeners(count: 1)
        // The watchdog sleeps until the expiry, the earliest deadline.
        await clock.waitForSleepers { $0.contains(.init(offset: .seconds(60))) }
        clock.advance(to: .init(offset: .seconds(59)))
        clock.advance(to: .init(offset: .seconds(60)))
        guard case .error(nil, let expired)? = await stream.next() else { Issue.record("expected the connection told its token expired"); return }
        #expect(expired.code == .unauthenticated && expired.reason == TandemError.tokenExpired)
        await server.waitForListeners(count: 0)
        // Everything after is refused the same way.
        now.withLock { $0 += 60 }
        stream.send(.get(id: 2, path: try DocumentPath("users/ada/notes/1")))
        guard case .error(2, let refused)? = await stream.next() else { Issue.record("expected the read refused"); return }
        #expect(refused.reason == TandemError.tokenExpired)
        await stream.close()
        await server.stop()
    }

    @Test("a connection whose token expires is refused everything after, saying so, and its listeners stop")
    func expiryOnAnOpenConnection() async throws {
        let (server, tokens) = try await server()
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "c", protocolVersion: TandemVersion.wireProtocol, token: try token(tokens, "ada", lifetime: .seconds(60))))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        stream.send(.listen(id: 1, target: .collection(try CollectionPath("users/ada/notes"), Query()), resumeFrom: nil))
        guard case .batch(1, _, _, _)? = await stream.next() else { Issue.record("expected the snapshot"); return }
        await server.waitForListeners(count: 1)
        now.withLock { $0 += 61 }
        stream.send(.heartbeat)
        guard case .error(nil, let expired)? = await stream.next() else { Issue.record("expected the heartbeat refused"); return }
        #expect(expired.code == .unauthenticated && expired.reason == TandemError.tokenExpired)
        await server.waitForListeners(count: 0)
        await stream.close()
        await server.stop()
    }
}
