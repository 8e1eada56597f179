import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// Access rules on a live server: every identity against every operation over HTTP and the
/// WebSocket, and the rules' document conditions (queries proven by their filters, writes checked
/// before and after, document listeners stopped when their document stops satisfying them).
// Two minutes: alone the matrix takes under a second, but beside the whole suite on two cores it
// has taken 50–75 s, and the limit is a guard against a hang, not a measure of speed.
@Suite("Authorization", .timeLimit(.minutes(5)))
struct AuthorizationTests {
    static let secret = "the-authorization-secret-long-enough"
    static let rules = """
    rules:
      - match: users/{uid}/{rest=**}
        read: auth.uid == uid || auth.token.admin == true
        write: auth.uid == uid || auth.token.admin == true
      - match: rooms/{room}
        read: resource.data.owner == auth.uid
        create: request.data.owner == auth.uid
        update: resource.data.owner == auth.uid && request.data.owner == auth.uid
        delete: resource.data.owner == auth.uid
    """

    enum Who: String, CaseIterable {
        case anonymous, owner, other, expired, forged, admin
    }

    enum Outcome: Equatable, CustomStringConvertible {
        case ok, unauthenticated, denied, other(String)
        var description: String {
            switch self {
            case .ok: "ok"
            case .unauthenticated: "unauthenticated"
            case .denied: "permission-denied"
            case .other(let text): text
            }
        }
        init(_ code: TandemError.Code) {
            switch code {
            case .unauthenticated: self = .unauthenticated
            case .permissionDenied: self = .denied
            default: self = .other(code.rawValue)
            }
        }
    }

    func start(rules: String = Self.rules) async throws -> (LiveServer, BearerTokens) {
        let tokens = try await BearerTokens(secret: Self.secret)
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens, rules: try AccessRules(parsing: rules))
        return (try await LiveServer.start(configuration: configuration), tokens)
    }

    func token(_ who: Who, _ tokens: BearerTokens) async throws -> String? {
        switch who {
        case .anonymous: return nil
        case .owner: return try tokens.mint(subject: "ada")
        case .other: return try tokens.mint(subject: "bob")
        case .expired: return try tokens.mint(subject: "ada", lifetime: .seconds(3600), now: Date().addingTimeInterval(-7200))
        case .forged: return try await BearerTokens(secret: "not-the-secret-of-this-server-at-all").mint(subject: "ada", claims: ["admin": true])
        case .admin: return try tokens.mint(subject: "ops", claims: ["admin": true])
        }
    }

    func call(_ server: LiveServer, _ method: String, _ path: String, body: String? = nil, token: String?) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        if let body { request.httpBody = Data(body.utf8) }
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONText.parse(bytes: data)) ?? .null)
    }

    func outcome(_ status: Int, _ body: JSONValue) -> Outcome {
        if status == 200 { return .ok }
        return Outcome(TandemError.Code(rawValue: body[field: "error"]?[field: "code"]?.stringValue ?? "status \(status)"))
    }

    func path(_ text: String) -> DocumentPath { try! DocumentPath(text) }

    /// What each identity gets for every operation on ada's documents (changes: the whole feed
    /// over HTTP, a resumed listener over the WebSocket).
    func expected(_ who: Who, _ operation: String, overHTTP: Bool) -> Outcome {
        switch who {
        case .anonymous, .expired, .forged: return .unauthenticated
        case .other: return .denied
        case .admin: return .ok
        case .owner: return operation == "changes" && overHTTP ? .denied : .ok
        }
    }

    static let operations = ["get", "query", "listen", "changes", "set", "update", "delete", "batch"]

    @Test("every identity × every operation, over HTTP and the WebSocket, gets its expected answer, and only allowed writes are written")
    func matrix() async throws {
        let (server, tokens) = try await start()
        var seed: [Mutation] = [.set(path("users/ada/notes/base"), ["text": "hi"])]
        for who in Who.allCases {
            seed.append(.set(path("users/ada/notes/http-del-\(who)"), [:]))
            seed.append(.set(path("users/ada/notes/ws-del-\(who)"), [:]))
        }
        _ = try await server.store.commit(seed)
        var failures: [String] = []

        for who in Who.allCases {
            let token = try await token(who, tokens)
            // HTTP: no listeners; `changes` is the whole feed.
            let http: [(String, String, String, String?)] = [
                ("get", "GET", "/v1/documents/users/ada/notes/base", nil),
                ("query", "POST", "/v1/query", #"{"collection":"users/ada/notes"}"#),
                ("changes", "GET", "/v1/changes?since=0", nil),
                ("set", "PUT", "/v1/documents/users/ada/notes/http-set-\(who)", #"{"by":"\#(who)"}"#),
                ("update", "PATCH", "/v1/documents/users/ada/notes/base", #"{"http-\#(who)":true}"#),
                ("delete", "DELETE", "/v1/documents/users/ada/notes/http-del-\(who)", nil),
                ("batch", "POST", "/v1/commit", #"{"writes":[{"op":"set","path":"users/ada/notes/http-batch-\#(who)","data":{}},{"op":"update","path":"users/ada/notes/base","fields":{"batch-\#(who)":true}}]}"#),
            ]
            for (operation, method, target, body) in http {
                let (status, answer) = try await call(server, method, target, body: body, token: token)
                let got = outcome(status, answer)
                if got != expected(who, operation, overHTTP: true) {
                    failures.append("HTTP \(who) \(operation): \(got), expected \(expected(who, operation, overHTTP: true)) — \(answer)")
                }
            }

            // The WebSocket: a hello with a refused token is refused, and so is everything after it.
            let stream = RawStream(port: server.port)
            stream.send(.hello(clientID: "ws-\(who)", protocolVersion: TandemVersion.wireProtocol, token: token))
            let welcomed: Bool
            switch await stream.next() {
            case .welcome?: welcomed = true
            case .error(nil, let refusal)?:
                welcomed = false
                if Outcome(refusal.code) != expected(who, "hello", overHTTP: false) { failures.append("WS \(who) hello: \(refusal.code)") }
                if who == .expired && refusal.reason != TandemError.tokenExpired { failures.append("WS expired hello without token-expired") }
            case let other: failures.append("WS \(who) hello: \(String(describing: other))"); continue
            }
            let notes = try CollectionPath("users/ada/notes")
            let ws: [(String, ClientMessage)] = [
                ("get", .get(id: 1, path: path("users/ada/notes/base"))),
                ("query", .query(id: 2, target: .collection(notes, Query()))),
                ("listen", .listen(id: 3, target: .collection(notes, Query()), resumeFrom: nil)),
                ("changes", .listen(id: 4, target: .collection(notes, Query()), resumeFrom: Version(1))),
                ("set", .write(id: 5, mutations: [.set(path("users/ada/notes/ws-set-\(who)"), ["by": .string(who.rawValue)])])),
                ("update", .write(id: 6, mutations: [.update(path("users/ada/notes/base"), fields: [try FieldPath(["ws-\(who)"]): true])])),
                ("delete", .write(id: 7, mutations: [.delete(path("users/ada/notes/ws-del-\(who)"))])),
                ("batch", .write(id: 8, mutations: [.set(path("users/ada/notes/ws-batch-\(who)"), [:]), .update(path("users/ada/notes/base"), fields: [try FieldPath(["wsb-\(who)"]): true])])),
            ]
            for (operation, message) in ws {
                stream.send(message)
                let got = await answer(to: message.requestID!, on: stream)
                // After a refused hello every request is refused as too early: nothing runs.
                let want = welcomed ? expected(who, operation, overHTTP: false) : .other("failed-precondition")
                if got != want { failures.append("WS \(who) \(operation): \(got), expected \(want)") }
            }
            await stream.close()
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")

        // Exactly the allowed writes were written.
        let base = try #require(try await server.store.document(at: path("users/ada/notes/base")))
        for who in Who.allCases {
            let allowed = who == .owner || who == .admin
            for prefix in ["http", "ws"] {
                #expect((try await server.store.document(at: path("users/ada/notes/\(prefix)-set-\(who)")) != nil) == allowed, "\(prefix) set by \(who)")
                #expect((try await server.store.document(at: path("users/ada/notes/\(prefix)-batch-\(who)")) != nil) == allowed, "\(prefix) batch by \(who)")
                #expect((try await server.store.document(at: path("users/ada/notes/\(prefix)-del-\(who)")) == nil) == allowed, "\(prefix) delete by \(who)")
            }
            #expect((base.data["http-\(who)"] != nil) == allowed && (base.data["ws-\(who)"] != nil) == allowed, "update by \(who)")
            #expect((base.data["batch-\(who)"] != nil) == allowed && (base.data["wsb-\(who)"] != nil) == allowed, "batch update by \(who)")
        }
        await server.stop()
    }

    /// The answer to one request, skipping what listeners are sent meanwhile.
    func answer(to id: Int, on stream: RawStream) async -> Outcome {
        while let message = await stream.next() {
            switch message {
            case .ack(id, let acknowledgements):
                if let refused = acknowledgements.first(where: { $0.status == .refused }) { return Outcome(refused.error?.code ?? .unknown) }
                return .ok
            case .documents(id, _, _), .batch(id, _, _, _):
                return .ok
            case .sharedBatch(let targets, _) where targets.contains(id):
                return .ok
            case .error(id, let error):
                return Outcome(error.code)
            default:
                continue
            }
        }
        return .other("closed")
    }

    @Test("collection and group listings name only what the caller may list whole (an operator sees every name); a name the caller may not list reads as empty")
    func listings() async throws {
        // The first rule covering a document decides: `shared` comes before the catch-all.
        let rules = Self.rules.replacingOccurrences(of: "rules:\n", with: """
            rules:
              - match: notes/{note}
                read: true
              - match: users/{uid}/shared/{doc}
                read: true

            """)
        let (server, tokens) = try await start(rules: rules)
        _ = try await server.store.commit([.set(path("users/ada"), [:]), .set(path("users/ada/notes/1"), [:]), .set(path("users/ada/shared/1"), [:]),
                                           .set(path("users/bob/notes/1"), [:]), .set(path("rooms/a"), ["owner": "ada"]), .set(path("notes/x"), [:])])
        func names(_ who: Who, _ path: String) async throws -> [String] {
            let (status, body) = try await call(server, "GET", path, token: try await token(who, tokens))
            #expect(status == 200, "\(who) \(path): \(body)")
            return (body[field: "collections"] ?? body[field: "groups"])?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        #expect(try await names(.admin, "/v1/collections") == ["notes", "rooms", "users"])
        #expect(try await names(.admin, "/v1/collections?parent=users/bob") == ["notes"])
        #expect(try await names(.admin, "/v1/groups") == ["notes", "rooms", "shared", "users"])
        // ada may list her own collections, and the open `notes`; not `users` or `rooms` whole.
        #expect(try await names(.owner, "/v1/collections") == ["notes"])
        #expect(try await names(.owner, "/v1/collections?parent=users/ada") == ["notes", "shared"])
        // bob sees under ada only what anyone may read, and his own listing of nothing reads the same.
        #expect(try await names(.other, "/v1/collections?parent=users/ada") == ["shared"])
        #expect(try await names(.other, "/v1/collections?parent=users/nobody") == [])
        // A group spans every depth (`x/shared/y` too, which no rule lets anyone read): none is
        // listable whole by these rules.
        #expect(try await names(.owner, "/v1/groups") == [])
        let (status, body) = try await call(server, "GET", "/v1/collections?parent=users", token: try await token(.owner, tokens))
        #expect(status == 400 && body[field: "error"]?[field: "code"] == "invalid-argument")
        #expect(try await call(server, "GET", "/v1/collections", token: try await token(.forged, tokens)).0 == 401)
        await server.stop()
    }

    @Test("rules reading documents: writes checked before and after, queries allowed by their filters, a document listener stopped once its document stops satisfying the rule")
    func documentRules() async throws {
        let (server, tokens) = try await start()
        let ada = try tokens.mint(subject: "ada")
        let bob = try tokens.mint(subject: "bob")

        var (status, body) = try await call(server, "PUT", "/v1/documents/rooms/r1", body: #"{"owner":"ada","name":"Lab"}"#, token: ada)
        #expect(status == 200, "\(body)")
        (status, body) = try await call(server, "PUT", "/v1/documents/rooms/r2", body: #"{"owner":"ada"}"#, token: bob)
        #expect(status == 403 && outcome(status, body) == .denied, "a room created for someone else")
        (status, body) = try await call(server, "PATCH", "/v1/documents/rooms/r1", body: #"{"owner":"bob"}"#, token: ada)
        #expect(status == 403 && (body[field: "error"]?[field: "message"]?.stringValue ?? "").contains("rule 2"), "giving a room away fails the after check: \(body)")
        (status, body) = try await call(server, "PATCH", "/v1/documents/rooms/r1", body: #"{"name":"Lab 2"}"#, token: ada)
        #expect(status == 200)
        (status, body) = try await call(server, "GET", "/v1/documents/rooms/r1", token: bob)
        #expect(status == 403)
        (status, body) = try await call(server, "GET", "/v1/documents/rooms/none", token: ada)
        #expect(status == 403, "a missing document has no owner to match")

        // Rules are not filters.
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection":"rooms"}"#, token: ada)
        #expect(status == 403 && (body[field: "error"]?[field: "message"]?.stringValue ?? "").contains("not filters"), "\(body)")
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection":"rooms","query":[{"where":"owner","op":"==","value":"ada"}]}"#, token: ada)
        #expect(status == 200 && body[field: "documents"]?.arrayValue?.count == 1, "\(body)")
        (status, body) = try await call(server, "POST", "/v1/query", body: #"{"collection":"rooms","query":[{"where":"owner","op":"==","value":"ada"}]}"#, token: bob)
        #expect(status == 403)

        // A document listener: allowed while the room is ada's, stopped when it is given away.
        _ = try await server.store.commit([.set(path("rooms/r3"), ["owner": "ada"])])
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "ada-phone", protocolVersion: TandemVersion.wireProtocol, token: ada))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        stream.send(.listen(id: 1, target: .document(path("rooms/r3")), resumeFrom: nil))
        guard case .batch(1, let snapshot, _, _)? = await stream.next() else { Issue.record("expected the snapshot"); return }
        #expect(snapshot.changes.first?.document?.data["owner"] == "ada")
        stream.send(.listen(id: 2, target: .document(path("rooms/r1")), resumeFrom: nil))
        guard case .batch(2, _, _, _)? = await stream.next() else { Issue.record("expected the second snapshot"); return }
        stream.send(.listen(id: 3, target: .document(path("rooms/none")), resumeFrom: nil))
        guard case .error(3, let absent)? = await stream.next() else { Issue.record("expected the listen on a missing room refused"); return }
        #expect(absent.code == .permissionDenied)
        // Told versions only, a listener would learn of changes to a room it may not read.
        stream.send(.listen(id: 4, target: .document(path("rooms/r1")), resumeFrom: nil, notify: true))
        guard case .error(4, let notified)? = await stream.next() else { Issue.record("expected a notify listen on a room the rules read refused"); return }
        #expect(notified.code == .permissionDenied && notified.message.contains("without notify"))
        await server.waitForListeners(count: 2)

        _ = try await server.store.commit([.update(path("rooms/r3"), fields: ["owner": "carol"])])
        guard case .error(1, let revoked)? = await stream.next() else { Issue.record("expected the listener stopped"); return }
        #expect(revoked.code == .permissionDenied && revoked.message.contains("rooms/r3"))
        await server.waitForListeners(count: 1)
        // The other listener goes on.
        _ = try await server.store.commit([.update(path("rooms/r1"), fields: ["name": "Lab 3"])])
        guard case .batch(2, let change, _, _)? = await stream.next() else { Issue.record("expected the other listener's change"); return }
        #expect(change.changes.first?.document?.data["name"] == "Lab 3")
        await stream.close()
        await server.stop()
    }

    @Test("nothing of a document the caller may not read gets out: not in a write's answer, not in a failed write's error, not as a removal in a resumed listener")
    func nothingLeaks() async throws {
        let (server, tokens) = try await start(rules: """
        rules:
          - match: polls/{poll}
            get: resource.data.owner == auth.uid
            list: resource.data.owner == auth.uid
            update: auth != null
          - match: rooms/{room}
            read: resource.data.owner == auth.uid
            write: request.data.owner == auth.uid
        """)
        let bob = try tokens.mint(subject: "bob")
        _ = try await server.store.commit([.set(path("polls/p1"), ["owner": "ada", "secret": "s", "votes": 0])])

        // Bob may vote, but not read the poll: his answer carries no document.
        var (status, body) = try await call(server, "PATCH", "/v1/documents/polls/p1", body: #"{"votes":1}"#, token: bob)
        #expect(status == 200 && body[field: "document"] == nil && !"\(body)".contains("secret"), "\(body)")
        #expect(body[field: "concealed"] == true && body[field: "deleted"] == nil, "applied, not read: never called a deletion: \(body)")
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "bob-phone", protocolVersion: TandemVersion.wireProtocol, token: bob))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        stream.send(.write(id: 1, mutations: [.update(path("polls/p1"), fields: ["votes": 2])]))
        guard case .ack(1, let acknowledgements)? = await stream.next() else { Issue.record("expected the ack"); return }
        #expect(acknowledgements.first?.status == .applied && acknowledgements.first?.document == nil && acknowledgements.first?.isConcealed == true)

        // A failed precondition on a document he may not read is answered as a refusal, not with its version.
        (status, body) = try await call(server, "POST", "/v1/commit", body: #"{"writes":[{"op":"update","path":"polls/p1","fields":{"votes":3},"precondition":{"version":1}}]}"#, token: bob)
        #expect(status == 403 && !"\(body)".contains("version 2"), "\(body)")
        (status, body) = try await call(server, "PATCH", "/v1/documents/polls/none", body: #"{"votes":1}"#, token: bob)
        #expect(status == 403, "an update of a missing poll must not say it is missing: \(body)")

        // A resumed listener over bob's rooms is sent a fresh snapshot, never ada's room leaving.
        _ = try await server.store.commit([.set(path("rooms/bobs"), ["owner": "bob"])])
        let resumeFrom = try await server.store.currentVersion()
        _ = try await server.store.commit([.set(path("rooms/adas"), ["owner": "ada", "name": "Private"])])
        stream.send(.listen(id: 2, target: .collection(try CollectionPath("rooms"), Query().whereField("owner", isEqualTo: "bob")), resumeFrom: resumeFrom))
        guard case .batch(2, let batch, let reset, _)? = await stream.next() else { Issue.record("expected the listener's batch"); return }
        #expect(reset && batch.isSnapshot && batch.changes.map(\.path.description) == ["rooms/bobs"], "\(batch.changes)")
        _ = try await server.store.commit([.set(path("rooms/adas"), ["owner": "ada", "name": "Still private"]), .set(path("rooms/bobs"), ["owner": "bob", "n": 1])])
        guard case .batch(2, let next, _, _)? = await stream.next() else { Issue.record("expected the next batch"); return }
        #expect(next.changes.map(\.path.description) == ["rooms/bobs"], "\(next.changes)")
        await stream.close()
        await server.stop()
    }

    @Test("a refused write reads the same whatever the document's hidden state: there or not, any precondition, over HTTP and the WebSocket")
    func refusalsRevealNothing() async throws {
        let (server, tokens) = try await start(rules: """
        rules:
          - match: rooms/{room}
            read: resource.data.owner == auth.uid
            create: request.data.owner == auth.uid
            update: resource.data.owner == auth.uid
            delete: resource.data.owner == auth.uid
        """)
        let bob = try tokens.mint(subject: "bob")
        func refusal(_ method: String, _ query: String = "", body: String? = #"{"owner":"ada"}"#) async throws -> String {
            let (status, answer) = try await call(server, method, "/v1/documents/rooms/r\(query)", body: body, token: bob)
            #expect(status == 403, "\(method) \(query): \(answer)")
            return answer[field: "error"]?[field: "message"]?.stringValue ?? "\(answer)"
        }
        // Missing: a create, a delete, and preconditions that fail or hold.
        let missing = try await refusal("PUT")
        #expect(try await refusal("PUT", "?exists=true") == missing)
        #expect(try await refusal("PUT", "?version=7") == missing)
        #expect(try await refusal("DELETE", body: nil) == missing)
        #expect(try await refusal("PATCH", body: #"{"n":1}"#) == missing)
        // Ada's: an update, a delete, and preconditions that fail on its existence and version.
        _ = try await server.store.commit([.set(path("rooms/r"), ["owner": "ada"])])
        #expect(try await refusal("PUT") == missing)
        #expect(try await refusal("PUT", "?exists=false") == missing)
        #expect(try await refusal("PUT", "?version=999") == missing)
        #expect(try await refusal("PUT", "?version=1") == missing)
        #expect(try await refusal("DELETE", body: nil) == missing)
        #expect(try await refusal("PATCH", body: #"{"n":1}"#) == missing)
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "bob-phone", protocolVersion: TandemVersion.wireProtocol, token: bob))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        var set = Mutation.set(path("rooms/r"), ["owner": "ada"])
        set.precondition = .version(Version(999))
        stream.send(.write(id: 1, mutations: [set, .update(path("rooms/r"), fields: ["n": 1])]))
        guard case .ack(1, let acknowledgements)? = await stream.next() else { Issue.record("expected the ack"); return }
        #expect(acknowledgements.map(\.status) == [.refused, .refused])
        #expect(acknowledgements.first?.error?.message == missing && !missing.contains("update") && !missing.contains("create"), "\(acknowledgements)")
        await stream.close()
        await server.stop()
    }

    @Test("a write after which its caller may not read the document is answered applied and concealed, never as a deletion")
    func handOverIsNotADeletion() async throws {
        let (server, tokens) = try await start(rules: """
        rules:
          - match: rooms/{room}
            read: resource.data.owner == auth.uid
            write: auth != null
        """)
        let ada = try tokens.mint(subject: "ada")
        var (status, body) = try await call(server, "PUT", "/v1/documents/rooms/r", body: #"{"owner":"ada"}"#, token: ada)
        #expect(status == 200 && body[field: "data"]?[field: "owner"] == "ada", "\(body)")
        // Ada gives her room to Bob: applied, and what it left is Bob's to read.
        (status, body) = try await call(server, "PATCH", "/v1/documents/rooms/r", body: #"{"owner":"bob"}"#, token: ada)
        #expect(status == 200 && body[field: "concealed"] == true && body[field: "deleted"] == nil && body[field: "version"]?.intValue != nil, "\(body)")
        #expect(try await server.store.read(.document(path("rooms/r"))).documents.first?.data["owner"] == "bob")
        let stream = RawStream(port: server.port)
        stream.send(.hello(clientID: "ada-phone", protocolVersion: TandemVersion.wireProtocol, token: ada))
        guard case .welcome? = await stream.next() else { Issue.record("expected welcome"); return }
        stream.send(.write(id: 1, mutations: [.update(path("rooms/r"), fields: ["name": "Bob's now"]), .delete(path("rooms/r"))]))
        guard case .ack(1, let acknowledgements)? = await stream.next() else { Issue.record("expected the ack"); return }
        #expect(acknowledgements.map(\.status) == [.applied, .applied])
        #expect(acknowledgements.map(\.isConcealed) == [true, false], "the hand-over is concealed; the deletion is a deletion: \(acknowledgements)")
        #expect(acknowledgements.allSatisfy { $0.document == nil })
        await stream.close()
        await server.stop()
    }
}
