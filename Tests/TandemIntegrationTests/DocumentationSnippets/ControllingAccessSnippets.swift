import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// The code of the TandemServer article "Controlling access" (`ControllingAccess.md`), run against
/// a real server: the article's rules, its tokens, and what a refusal says.
@Suite("Controlling access article", .timeLimit(.minutes(5)))
struct ControllingAccessSnippets {
    static let secret = String(repeating: "controlling-access-", count: 3)

    @Test("the article's rules: an owner writes and reads her room; anyone else is refused alike whether a room exists or not; a query must prove the rule")
    func rules() async throws {
        let secret = Self.secret
        // snippet: controlling-access-configure
        let rules = try AccessRules(parsing: """
            rules:
              - match: users/{uid}/{rest=**}
                read: auth.uid == uid
                write: auth.uid == uid
              - match: rooms/{room}
                read: resource.data.owner == auth.uid
                create: request.data.owner == auth.uid
                update: resource.data.owner == auth.uid && request.data.owner == auth.uid
                delete: resource.data.owner == auth.uid
            """)
        let tokens = try await BearerTokens(secret: secret)
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens, rules: rules)
        // end snippet

        // snippet: controlling-access-test
        let server = try await LiveServer.start(configuration: configuration)
        let ada = try tokens.mint(subject: "ada")
        let bob = try tokens.mint(subject: "bob")
        #expect(try await status("PUT", "/v1/documents/rooms/lab", #"{"owner": "ada"}"#, as: ada, on: server) == 200)
        #expect(try await status("GET", "/v1/documents/rooms/lab", as: ada, on: server) == 200)
        #expect(try await status("GET", "/v1/documents/rooms/lab", as: bob, on: server) == 403)    // not his room
        #expect(try await status("GET", "/v1/documents/rooms/none", as: bob, on: server) == 403)   // nor one that is not there
        #expect(try await status("GET", "/v1/documents/rooms/lab", as: nil, on: server) == 401)    // anonymous: sign in
        #expect(try await status("POST", "/v1/query", #"{"collection": "rooms"}"#, as: ada, on: server) == 403)
        #expect(try await status("POST", "/v1/query", #"{"collection": "rooms", "query": [{"where": "owner", "op": "==", "value": "ada"}]}"#, as: ada, on: server) == 200)
        await server.stop()
        // end snippet
    }

    // snippet: controlling-access-helper
    /// The HTTP status of one request, made as the user of `token` (anonymous when nil).
    func status(_ method: String, _ path: String, _ body: String? = nil, as token: String?, on server: LiveServer) async throws -> Int {
        var request = URLRequest(url: URL(string: server.url.absoluteString + path)!)
        request.httpMethod = method
        request.httpBody = body.map { Data($0.utf8) }
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }
    // end snippet

    @Test("a token names its user and carries its claims")
    func tokens() async throws {
        let secret = Self.secret
        // snippet: controlling-access-tokens
        let tokens = try await BearerTokens(secret: secret)   // at least 32 bytes
        let token = try tokens.mint(subject: "ada", lifetime: .seconds(3600), claims: ["role": "editor"])
        let user = try tokens.verify(token)                   // uid "ada"; claims["role"] is "editor"
        // end snippet
        #expect(user.uid == "ada" && user.claims["role"] == "editor")
    }

    @Test("a rules file's error says its line and column")
    func errors() {
        #expect(Self.check("rules:\n  - match: rooms/{room}\n    read: auth.uid = room\n").hasPrefix("line 3, column 20: "))
        #expect(Self.check("rules:\n  - match: rooms/{room}\n    read: true\n") == "1 rules, valid")
    }

    static func check(_ text: String) -> String {
        // snippet: controlling-access-errors
        do {
            let rules = try AccessRules(parsing: text)
            return "\(rules.count) rules, valid"
        } catch {
            return "line \(error.line), column \(error.column): \(error.message)"   // a RulesFileError
        }
        // end snippet
    }

    static func anonymousRules() throws -> SyncServerConfiguration {
        // snippet: controlling-access-anonymous
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: nil, rules: try AccessRules(contentsOfFile: "rules.yaml"))
        // end snippet
        return configuration
    }
}
