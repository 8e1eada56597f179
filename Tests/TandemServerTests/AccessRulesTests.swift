import Foundation
import Testing
import TandemCore
@testable import TandemServer

@Suite("Access rules")
struct AccessRulesTests {
    static let file = """
    rules:
      - match: users/{uid}/{rest=**}
        read: auth.uid == uid
        write: auth.uid == uid
      - match: rooms/{room}
        get: auth != null
        list: resource.data.owner == auth.uid || auth.token.role == 'admin'
        create: request.data.owner == auth.uid
        update: resource.data.owner == auth.uid && request.data.owner == auth.uid
        delete: resource.data.owner == auth.uid || auth.token.role == 'admin'
      - match: public/{doc}
        read: true
        write: auth.token.role == "admin"
      - match: "{rest=**}"
        list: resource.data.visibility == 'everyone'
    """

    let ada = AuthenticatedUser(uid: "ada")
    let bob = AuthenticatedUser(uid: "bob")
    let admin = AuthenticatedUser(uid: "root", claims: ["role": "admin"])

    func path(_ text: String) -> DocumentPath { try! DocumentPath(text) }
    func collection(_ text: String, _ query: Query = Query()) -> ListenTarget { .collection(try! CollectionPath(text), query) }
    func doc(_ text: String, _ data: JSONObject) -> Document { Document(path: path(text), data: data) }

    func parseError(_ text: String) -> RulesFileError? {
        do {
            _ = try AccessRules(parsing: text)
            return nil
        } catch {
            return error
        }
    }

    @Test("a rules file parses from YAML and from JSON, to the same decisions")
    func parses() throws {
        let yaml = try AccessRules(parsing: Self.file)
        #expect(yaml.count == 4)
        let json = try AccessRules(parsing: """
        {"rules": [
        \t{"match": "users/{uid}/{rest=**}", "read": "auth.uid == uid", "write": "auth.uid == uid"},
        \t{"match":"public/{doc}","read":true,"write":false}
        ]}
        """)
        #expect(json.count == 2)
        for rules in [yaml, json] {
            #expect(rules.decide(.get, at: path("users/ada"), auth: ada, resource: .absent).truth == .yes)
            #expect(rules.decide(.update, at: path("users/ada/notes/n1"), auth: ada, resource: .absent).truth == .yes)
            #expect(rules.decide(.get, at: path("users/ada/notes/n1"), auth: bob, resource: .absent).truth == .no)
            #expect(rules.decide(.get, at: path("public/p"), auth: nil, resource: .absent).truth == .yes)
        }
        // A bare list of rules is a rules file too.
        #expect(try AccessRules(parsing: "- match: a/{b}\n  read: true\n").count == 1)
    }

    @Test("a rule's literal segment matches its own bytes only: a canonically equivalent spelling is another path")
    func literalsMatchBytes() throws {
        let rules = try AccessRules(parsing: """
            rules:
              - match: "Keys/{doc}"
                read: true
              - match: "caf\u{E9}/{doc}"
                read: true
            """)
        #expect(rules.decide(.get, at: path("Keys/k1"), auth: nil, resource: .absent).truth == .yes)
        // U+212A KELVIN SIGN and a decomposed é: equal as Swift strings, other documents in a store.
        #expect(rules.decide(.get, at: path("\u{212A}eys/k1"), auth: nil, resource: .absent).truth == .no)
        #expect(rules.decide(.get, at: path("caf\u{E9}/d"), auth: nil, resource: .absent).truth == .yes)
        #expect(rules.decide(.get, at: path("cafe\u{301}/d"), auth: nil, resource: .absent).truth == .no)
    }

    @Test("errors say the line and the column, and what was expected")
    func errorPositions() {
        var error = parseError("rules:\n  - match: rooms/{room}\n    read: auth.uid = room\n")
        #expect(error?.line == 3 && error?.column == 20, "\(String(describing: error))")
        #expect(error?.message.contains("`==`") == true)

        error = parseError("rules:\n  - match: rooms/{room}\n    read: 'auth.uid == roomz'\n")
        #expect(error?.line == 3 && error?.column == 24, "\(String(describing: error))")
        #expect(error?.message.contains("unknown name `roomz`") == true && error?.message.contains("room") == true)

        error = parseError("rules:\n  - match: rooms/{room}\n    reed: true\n")
        #expect(error?.line == 3 && error?.column == 5 && error?.message.contains("unknown key `reed`") == true, "\(String(describing: error))")

        error = parseError("rules:\n  - match: rooms/{rest=**}/x\n    read: true\n")
        #expect(error?.line == 2 && error?.column == 18 && error?.message.contains("last segment") == true, "\(String(describing: error))")

        error = parseError("rules:\n  - match: rooms\n    read: true\n")
        #expect(error?.line == 2 && error?.message.contains("collection") == true, "\(String(describing: error))")

        error = parseError("rules:\n  - read: true\n")
        #expect(error?.line == 2 && error?.message.contains("no `match`") == true, "\(String(describing: error))")

        error = parseError("rules:\n  - match: a/{b}\n    read: (auth != null\n")
        #expect(error?.line == 3 && error?.column == 24 && error?.message.contains("`)`") == true, "\(String(describing: error))")

        error = parseError("rules:\n  - match: a/{b}\n    read: |\n      auth != null &&\n        resource.data.x == 'y' &&\n")
        #expect(error?.line == 6 && error?.message.contains("found the end") == true, "\(String(describing: error))")

        error = parseError("rules: [\n  {\"match\": \"a/{b}\", \"read\": \"auth.uid == b\"\n")
        #expect(error?.line == 3 && error?.message.contains("not valid YAML or JSON") == true, "\(String(describing: error))")

        #expect(parseError("")?.message.contains("empty") == true)
        #expect(parseError("rules:\n  - match: a/{b}\n")?.message.contains("allows nothing") == true)
        #expect(parseError("rules:\n  - match: a/{b}\n    read: \"'x'\"\n")?.message.contains("stands alone") == true)
        #expect(parseError("rules:\n  - match: a/{auth}\n    read: true\n")?.message.contains("something else") == true)
        #expect(parseError("rules:\n  - match: a/{b}\n    read: \(String(repeating: "(", count: 100))true\(String(repeating: ")", count: 100))\n")?.message.contains("nests") == true)
        let long = Array(repeating: "true", count: 300).joined(separator: " && ")
        #expect(parseError("rules:\n  - match: a/{b}\n    read: \(long)\n")?.message.contains("more than 256") == true)
        #expect(parseError("rules:\n  - match: a/{über}\n    read: true\n")?.message.contains("not a capture name") == true)
        error = parseError("rules:\r\n  - match: a/{b}\r\n    read: |\r\n      auth != null &&\r\n        x == 1\r\n")
        #expect(error?.line == 5 && error?.column == 9 && error?.message.contains("unknown name `x`") == true, "\(String(describing: error))")
    }

    @Test("writes are decided against the document before and after; the first rule that covers a path decides")
    func writes() throws {
        let rules = try AccessRules(parsing: Self.file)
        let room = path("rooms/r1")
        let mine = doc("rooms/r1", ["owner": "ada"])
        let bobs = doc("rooms/r1", ["owner": "bob"])
        #expect(rules.decide(.create, at: room, auth: ada, resource: .absent, request: RuleDocument(mine)).truth == .yes)
        #expect(rules.decide(.create, at: room, auth: ada, resource: .absent, request: RuleDocument(bobs)).truth == .no)
        #expect(rules.decide(.update, at: room, auth: ada, resource: RuleDocument(mine), request: RuleDocument(mine)).truth == .yes)
        // Giving the room away is an update whose after fails.
        #expect(rules.decide(.update, at: room, auth: ada, resource: RuleDocument(mine), request: RuleDocument(bobs)).truth == .no)
        #expect(rules.decide(.delete, at: room, auth: bob, resource: RuleDocument(mine)).truth != .yes)
        #expect(rules.decide(.delete, at: room, auth: admin, resource: RuleDocument(mine)).truth == .yes)
        // A field the document lacks is not a match, even for an anonymous caller (null == null).
        #expect(rules.decide(.create, at: room, auth: nil, resource: .absent, request: RuleDocument(doc("rooms/r1", [:]))).truth != .yes)
        // No rule gives `write` for `{rest=**}`, and nothing covers a path no pattern matches.
        #expect(rules.decide(.create, at: path("other/x"), auth: admin, resource: .absent, request: RuleDocument(doc("other/x", [:]))).truth == .no)
        #expect(rules.decide(.get, at: path("public/p"), auth: nil, resource: .absent).truth == .yes)
        #expect(rules.decide(.update, at: path("public/p"), auth: ada, resource: .absent).truth != .yes)
        #expect(rules.decide(.update, at: path("public/p"), auth: admin, resource: .absent).truth == .yes)
        // The default: users/{uid} and below.
        let own = AccessRules.ownDocuments
        #expect(own.decide(.create, at: path("users/ada/notes/n1"), auth: ada, resource: .absent).truth == .yes)
        #expect(own.decide(.create, at: path("users/bob/notes/n1"), auth: ada, resource: .absent).truth == .no)
        #expect(own.decide(.get, at: path("users/ada"), auth: nil, resource: .absent).truth != .yes)
        #expect(own.decide(.get, at: path("rooms/r1"), auth: ada, resource: .absent).rule == nil)
    }

    @Test("conditions: comparisons across types, claims, !, parentheses, and what is missing never being true")
    func conditions() throws {
        func truth(_ text: String, auth: AuthenticatedUser?, data: JSONObject? = ["n": 1, "flag": true, "nested": ["k": "v"]]) throws -> Truth {
            let rules = try AccessRules(parsing: "rules:\n  - match: c/{id}\n    read: \"\(text.replacingOccurrences(of: "\"", with: "\\\""))\"\n")
            let resource: RuleDocument = data.map { .known(id: "d1", data: $0) } ?? .absent
            return rules.decide(.get, at: path("c/d1"), auth: auth, resource: resource).truth
        }
        #expect(try truth("resource.data.n == 1.0", auth: nil) == .yes)
        #expect(try truth("resource.data.flag", auth: nil) == .yes)
        #expect(try truth("!resource.data.flag", auth: nil) == .no)
        #expect(try truth("resource.data.nested.k == 'v' && resource.id == id && id == 'd1'", auth: nil) == .yes)
        #expect(try truth("!(auth == null) || resource.data.n != 1", auth: nil) == .no)
        #expect(try truth("resource.data.missing == null", auth: nil) == .maybe)
        #expect(try truth("!(resource.data.missing == 'x')", auth: nil) == .maybe)
        #expect(try truth("resource.data.missing == 'x' || true", auth: nil) == .yes)
        #expect(try truth("resource.data.missing == 'x' && false", auth: nil) == .no)
        #expect(try truth("auth.token.role == 'admin'", auth: admin) == .yes)
        #expect(try truth("auth.token.role == 'admin'", auth: ada) == .maybe)
        #expect(try truth("auth.uid == null", auth: nil) == .maybe)
        #expect(try truth("resource == null", auth: nil, data: nil) == .yes)
        #expect(try truth("resource.data.n == 1", auth: nil, data: nil) == .maybe)
    }

    @Test("a query is allowed only where its own filters prove every document it could return may be read")
    func queries() throws {
        let rules = try AccessRules(parsing: Self.file)
        #expect(rules.decideList(collection("users/ada/notes"), auth: ada).truth == .yes)
        #expect(rules.decideList(collection("users/ada/notes"), auth: bob).truth == .no)
        // Every user's document: the uid capture is not known.
        #expect(rules.decideList(collection("users"), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms"), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", isEqualTo: "ada")), auth: ada).truth == .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", isEqualTo: "bob")), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", in: ["ada"])), auth: ada).truth == .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", in: ["ada", "bob"])), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms"), auth: admin).truth == .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", isEqualTo: "ada")), auth: nil).truth != .yes)
        // Collection groups: every rule that could cover one of their documents must be proven.
        #expect(rules.decideList(.collectionGroup("things", Query().whereField("visibility", isEqualTo: "everyone")), auth: ada).truth != .yes,
                "users/{uid}/{rest=**} could cover a `things` document and its uid is not known")
        let open = try AccessRules(parsing: "rules:\n  - match: 'rooms/{room}/messages/{message}'\n    list: resource.data.public == true\n  - match: '{rest=**}'\n    list: resource.data.visibility == 'everyone'\n")
        #expect(open.decideList(.collectionGroup("messages", Query().whereField("public", isEqualTo: true).whereField("visibility", isEqualTo: "everyone")), auth: nil).truth == .yes)
        #expect(open.decideList(.collectionGroup("messages", Query().whereField("visibility", isEqualTo: "everyone")), auth: nil).truth != .yes)
        #expect(open.decideList(.collectionGroup("notes", Query().whereField("visibility", isEqualTo: "everyone")), auth: nil).truth == .yes)
        let captures = try AccessRules(parsing: "rules:\n  - match: '{c}/{d}/{rest=**}'\n    read: true\n")
        #expect(captures.decideList(.collectionGroup("messages", Query()), auth: nil).truth == .yes)
        let deep = try AccessRules(parsing: "rules:\n  - match: '{a}/{b}/{c}/{rest=**}'\n    read: true\n")
        #expect(deep.decideList(.collectionGroup("messages", Query()), auth: nil).truth != .yes, "a top-level messages document is not covered")
        // A literal id covers one document of the collection: proven, then the next rule decides.
        let special = try AccessRules(parsing: "rules:\n  - match: rooms/lobby\n    read: true\n  - match: rooms/{room}\n    read: auth != null\n")
        #expect(special.decideList(collection("rooms"), auth: ada).truth == .yes)
        #expect(special.decideList(collection("rooms"), auth: nil).truth != .yes)
    }

    @Test("a query with or filters is allowed only when every branch proves the rules")
    func orQueries() throws {
        let rules = try AccessRules(parsing: Self.file)
        func decide(_ filter: Filter, _ query: Query = Query(), auth: AuthenticatedUser?) -> Truth {
            rules.decideList(collection("rooms", query.whereFilter(filter)), auth: auth).truth
        }
        let mine = Filter.whereField("owner", isEqualTo: "ada")
        let open = Filter.whereField("status", isEqualTo: "open")
        // Every branch fixes the owner to the caller: allowed.
        #expect(decide(Filter.orFilter([Filter.andFilter([mine, open]), mine]), auth: ada) == .yes)
        #expect(decide(Filter.orFilter([Filter.andFilter([mine, open]), Filter.andFilter([mine, Filter.whereField("status", isEqualTo: "closed")])]), auth: ada) == .yes)
        // The owner fixed beside the or holds in every branch.
        #expect(decide(Filter.orFilter([open, Filter.whereField("status", isEqualTo: "closed")]), Query().whereField("owner", isEqualTo: "ada"), auth: ada) == .yes)
        // One branch proves nothing of the owner, or fixes another's: refused whole, whatever the other proves.
        #expect(decide(Filter.orFilter([mine, open]), auth: ada) != .yes)
        #expect(decide(Filter.orFilter([open, mine]), auth: ada) != .yes)
        #expect(decide(Filter.orFilter([mine, Filter.whereField("owner", isEqualTo: "bob")]), auth: ada) != .yes)
        #expect(decide(Filter.orFilter([Filter.andFilter([mine, open]), Filter.whereField("status", isEqualTo: "closed")]), auth: ada) != .yes)
        #expect(decide(Filter.orFilter([mine, mine]), auth: bob) != .yes)
        // A condition that holds whatever the document (an admin's token) needs no branch to prove anything.
        #expect(decide(Filter.orFilter([open, Filter.whereField("n", isEqualTo: 1)]), auth: admin) == .yes)
        // An and proves what its equalities prove together, as chained filters do.
        #expect(decide(Filter.andFilter([open, mine]), auth: ada) == .yes)
        #expect(decide(Filter.andFilter([open, Filter.whereField("n", isEqualTo: 1)]), auth: ada) != .yes)
        // in is an or of equalities: each value must prove the rules; a field fixed by == stays fixed.
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", in: ["ada", "ada"])), auth: ada).truth == .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", in: ["ada", "bob"])), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", isEqualTo: "ada").whereField("owner", in: ["ada", "bob"])), auth: ada).truth == .yes)
        #expect(decide(Filter.orFilter([Filter.whereField("owner", in: ["ada"]), Filter.andFilter([open, Filter.whereField("owner", in: ["ada", "ada"])])]), auth: ada) == .yes)
        // A collection group: each branch must prove every rule that could cover one of its documents.
        let group = try AccessRules(parsing: "rules:\n  - match: 'rooms/{room}/messages/{message}'\n    list: resource.data.public == true\n  - match: '{rest=**}'\n    list: resource.data.visibility == 'everyone'\n")
        let everyone = Filter.whereField("visibility", isEqualTo: "everyone")
        let isPublic = Filter.whereField("public", isEqualTo: true)
        #expect(group.decideList(.collectionGroup("messages", Query().whereFilter(Filter.orFilter([
            Filter.andFilter([isPublic, everyone]), Filter.andFilter([isPublic, everyone, Filter.whereField("n", isEqualTo: 1)]),
        ]))), auth: nil).truth == .yes)
        #expect(group.decideList(.collectionGroup("messages", Query().whereFilter(Filter.orFilter([Filter.andFilter([isPublic, everyone]), everyone]))), auth: nil).truth != .yes)
    }

    @Test("a rules file is read from disk; a missing or bad one says which file and where")
    func files() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rules-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("rules.yaml").path
        try Self.file.write(toFile: good, atomically: true, encoding: .utf8)
        #expect(try AccessRules(contentsOfFile: good).count == 4)
        let bad = directory.appendingPathComponent("bad.json").path
        try #"{"rules": [{"match": "a/{b}", "read": "auth.uid == c"}]}"#.write(toFile: bad, atomically: true, encoding: .utf8)
        #expect {
            try AccessRules(contentsOfFile: bad)
        } throws: { error in
            (error as? TandemError)?.message.hasPrefix("\(bad):1:") == true
        }
        #expect {
            try AccessRules(contentsOfFile: directory.appendingPathComponent("none.yaml").path)
        } throws: { error in
            (error as? TandemError)?.code == .notFound
        }
    }

    @Test("the README's rules file parses and decides as the README says")
    func readmeExample() throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let section = try #require(readme.range(of: "### Access rules (`--rules`)"))
        let start = try #require(readme.range(of: "```yaml\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let rules = try AccessRules(parsing: String(readme[start.upperBound..<end.lowerBound]))
        #expect(rules.count == 3)
        #expect(rules.decideList(collection("rooms"), auth: ada).truth != .yes)
        #expect(rules.decideList(collection("rooms", Query().whereField("owner", isEqualTo: "ada")), auth: ada).truth == .yes)
        #expect(rules.decideList(collection("rooms"), auth: AuthenticatedUser(uid: "eve", claims: ["role": "admin"])).truth == .yes)
        #expect(rules.decide(.get, at: path("public/p"), auth: nil, resource: .absent).truth == .yes)
        #expect(rules.decide(.create, at: path("public/p"), auth: ada, resource: .absent, request: RuleDocument(doc("public/p", [:]))).truth != .yes)
    }
}
