import Foundation
import Testing
import TandemCore

/// The web console in a real browser (headless Chromium over the DevTools protocol) against
/// `tandem serve` run as a child process, with writes from the `tandem` CLI beside it.
///
/// With `TANDEM_CONSOLE_SCREENSHOTS=DIR` the tests also write a screenshot of each page there
/// (the README's, in `docs/`, come from it).
@Suite("Console", .serialized, .enabled(if: Browser.runs, "No Chromium here: install Debian's chromium package to run the console's browser tests"), .timeLimit(.minutes(5)))
struct ConsoleTests {
    static let screenshots = ProcessInfo.processInfo.environment["TANDEM_CONSOLE_SCREENSHOTS"].map { URL(filePath: $0) }

    /// Runs `body` with a fresh browser, closed after it whatever happens.
    static func withBrowser(_ body: (Browser) async throws -> Void) async throws {
        let browser = try await Browser.launch()
        do {
            try await body(browser)
        } catch {
            await browser.close()
            throw error
        }
        await browser.close()
    }

    static func shoot(_ page: BrowserPage, _ name: String) async throws {
        guard let screenshots else { return }
        try FileManager.default.createDirectory(at: screenshots, withIntermediateDirectories: true)
        try await page.screenshot(to: screenshots.appendingPathComponent(name))
    }

    /// A document as `tandem get` prints it, or nil when the server has none.
    static func stored(_ path: String, url: String, token: String? = nil) async throws -> JSONValue? {
        let result = try await CLIProcess.run(["get", path, "--url", url] + (token.map { ["--token", $0] } ?? []))
        if result.status != 0 {
            #expect(result.err.contains("not-found"), "tandem get \(path): \(result.err)")
            return nil
        }
        return try JSONText.parse(result.out.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    static func cli(_ arguments: [String], url: String) async throws {
        let result = try await CLIProcess.run(arguments + ["--url", url])
        try #require(result.status == 0, "tandem \(arguments.joined(separator: " ")): \(result.err)")
    }

    /// Every request the page made went to the server it came from.
    static func expectOnlyServer(_ page: BrowserPage, port: Int) {
        let urls = page.requestedURLs()
        #expect(urls.count > 5, "the page's requests were not recorded: \(urls)")
        let outside = urls.filter { !($0.hasPrefix("http://127.0.0.1:\(port)/") || $0.hasPrefix("ws://127.0.0.1:\(port)/") || $0.hasPrefix("data:")) }
        #expect(outside.isEmpty, "the page reached outside the server: \(outside)")
        let problems = page.problems()
        #expect(problems.isEmpty, "the page threw or logged \(problems.count) errors, the first: \(problems.prefix(2))")
    }

    @Test("browse to a document, edit it with a version precondition (a concurrent change is reported, never overwritten), watch CLI writes arrive live, resume after a restart, and reach nothing but the server")
    func browseEditWatch() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let directory = TemporaryDirectory()
        var (server, url) = try await CLITests.serve(directory.url)
        defer { if server.process.isRunning { server.signal(SIGKILL) } }
        let port = try #require(URL(string: url)?.port)
        try await Self.cli(["set", "users/ada", #"{"name": "Ada", "age": 36, "score": 1.5, "tags": ["math", "code"], "address": {"city": "London"}}"#], url: url)
        try await Self.cli(["set", "users/bob", #"{"name": "Bob", "age": 17}"#], url: url)
        try await Self.cli(["set", "users/ada/notes/1", #"{"text": "hi"}"#], url: url)
        try await Self.cli(["set", "rooms/main", #"{"topic": "general"}"#], url: url)

        try await Self.withBrowser { browser in
            let page = try await browser.openPage()
            try await page.open("\(url)/console")
            #expect(try await page.text("#access-mode").contains("Open server"))

            // Browse: the root's collections, a collection's documents, a document.
            try await page.waitFor("document.querySelectorAll('#collections a').length === 2")
            try await Self.shoot(page, "console-root.png")
            try await page.click("[data-collection='users']")
            try await page.waitFor("document.querySelectorAll('#documents tr[data-path]').length === 2")
            try await Self.shoot(page, "console-collection.png")
            try await page.click("tr[data-path='users/ada'] a")
            try await page.waitFor("document.querySelector(\"#fields tr[data-field='age']\")")
            #expect(try await page.text("tr[data-field='age'] td.type") == "integer")
            #expect(try await page.text("tr[data-field='score'] td.type") == "double")
            #expect(try await page.text("tr[data-field='address.city'] td.value") == "\"London\"")
            #expect(try await page.text("#version") == "1")
            try await page.waitFor("document.querySelector('#subcollections a')?.textContent === 'notes'")
            try await Self.shoot(page, "console-document.png")

            // Edit a field: a real write, with the version the page showed as its precondition.
            try await page.click("tr[data-field='age'] .edit")
            try await page.fill("tr[data-field='age'] .edit-value", "37")
            try await page.click("tr[data-field='age'] .save")
            try await page.waitFor("document.querySelector('#notice [data-kind=notice]')")
            var ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"]?[field: "age"] == .int(37))
            #expect(try await page.text("#version") == ada[field: "version"]?.intValue.map(String.init))

            // A change from elsewhere while a field is edited: announced, and saving is refused.
            try await page.click("tr[data-field='name'] .edit")
            try await page.fill("tr[data-field='name'] .edit-value", "\"Ada L.\"")
            try await Self.cli(["update", "users/ada", #"{"age": 40}"#], url: url)
            try await page.waitFor("document.querySelector('#notice [data-kind=stale]')")
            try await page.click("tr[data-field='name'] .save")
            try await page.waitFor("document.querySelector('#notice [data-kind=error]')")
            #expect(try await page.text("#notice").contains("Nothing was overwritten"))
            ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"]?[field: "name"] == "Ada" && ada[field: "data"]?[field: "age"] == .int(40))
            try await page.waitFor("document.querySelector(\"tr[data-field='age'] td.value\")?.textContent === '40'")

            // Add a nested field, delete one.
            try await page.fill("#new-field", "address.zip")
            try await page.fill("#new-value", "\"N1\"")
            try await page.click("#add")
            try await page.waitFor("document.querySelector(\"tr[data-field='address.zip']\")")
            try await page.click("tr[data-field='score'] .remove")
            try await page.waitFor("!document.querySelector(\"tr[data-field='score']\")")
            ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"]?[field: "address"]?[field: "zip"] == "N1")
            #expect(ada[field: "data"]?[field: "score"] == nil)

            // A write from the CLI reaches the open document, its field highlighted.
            try await Self.cli(["update", "users/ada", #"{"visits": 1}"#], url: url)
            try await page.waitFor("document.querySelector(\"tr.changed[data-field='visits']\")")

            // A collection with a filter: the CLI command it shows gives the same documents, and
            // a new matching document arrives live.
            try await page.go("#/data/users")
            try await page.fill("#where", "age >= 18")
            try await page.click("#run")
            try await page.waitFor("document.querySelectorAll('#documents tr[data-path]').length === 1")
            let command = try await page.text("#cli")
            #expect(command == "tandem query users --where 'age >= 18' --limit 25 --url \(url)")
            try await Self.cli(["set", "users/cyd", #"{"name": "Cyd", "age": 30}"#], url: url)
            try await page.waitFor("document.querySelector(\"tr.changed[data-path='users/cyd']\")")
            let shown = try await page.evaluate("Array.from(document.querySelectorAll('#documents tr[data-path]'), row => row.dataset.path).join(' ')")
            let queried = try await CLIProcess.run(["query", "users", "--where", "age >= 18", "--limit", "25", "--url", url])
            let paths = try queried.lines.map { try JSONText.parse($0)[field: "path"]?.stringValue ?? "" }
            #expect(shown.stringValue == paths.joined(separator: " "))
            #expect(paths == ["users/ada", "users/cyd"])

            // The server restarts: the page says it is reconnecting, then resumes and goes on.
            server.signal(SIGTERM)
            #expect(await server.waitForExit() == 0)
            try await page.waitFor("document.querySelector('#live')?.dataset.status === 'reconnecting'")
            server = try RunningProcess(["serve", "--port", String(port), "--data-dir", directory.url.path])
            #expect(await server.nextLine() == "listening on \(url)")
            try await page.waitFor("document.querySelector('#live')?.dataset.status === 'live'")
            try await Self.cli(["set", "users/dee", #"{"name": "Dee", "age": 50}"#], url: url)
            try await page.waitFor("document.querySelector(\"tr.changed[data-path='users/dee']\")")

            // Delete a document from its page (asked twice).
            try await page.go("#/data/users/bob")
            try await page.waitFor("document.querySelector('#version')?.textContent === '2'")
            try await page.click("#delete-document")
            try await page.click("#delete-document")
            try await page.waitFor("document.querySelector('#missing')")
            #expect(try await Self.stored("users/bob", url: url) == nil)

            // Groups, and the server page from the metrics.
            try await page.go("#/groups")
            try await page.waitFor("document.querySelectorAll('#groups a').length === 3")
            try await Self.shoot(page, "console-groups.png")
            try await page.go("#/server")
            // The rate needs two readings of the metrics, the page's own two seconds apart.
            try await page.waitFor("document.querySelector('#commits')?.textContent.endsWith('/s)') && !document.querySelector('#commits').textContent.includes('…')")
            #expect(try await page.text("#server-access") == "open")
            #expect(try await page.text("#connections") == "1")
            #expect(try await page.text("#uptime").hasSuffix("s"))
            try await Self.shoot(page, "console-server.png")

            Self.expectOnlyServer(page, port: port)
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }

    @Test("on a secured server the console signs in with a token (from `tandem console --as`, or pasted) and shows only what the rules let that user see")
    func signedIn() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let directory = TemporaryDirectory()
        let secret = "console-test-secret-console-test-secret"
        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.path, "--auth-secret", secret])
        defer { if server.process.isRunning { server.signal(SIGKILL) } }
        let line = try #require(await server.nextLine())
        let url = String(line.dropFirst("listening on ".count))
        let port = try #require(URL(string: url)?.port)
        func token(_ user: String, _ claims: [String] = []) async throws -> String {
            let minted = try await CLIProcess.run(["token", "--sub", user, "--secret", secret] + claims.flatMap { ["--claim", $0] })
            return minted.out.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let ada = try await token("ada"), bob = try await token("bob")
        try await Self.cli(["set", "users/ada", #"{"name": "Ada"}"#, "--token", ada], url: url)
        try await Self.cli(["set", "users/bob", #"{"name": "Bob", "secret": "bob's"}"#, "--token", bob], url: url)

        let link = try await CLIProcess.run(["console", "--as", "ada", "--secret", secret, "--url", url])
        #expect(link.status == 0)
        let address = link.out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(address.hasPrefix("\(url)/console/#token="))

        try await Self.withBrowser { browser in
            let page = try await browser.openPage()
            try await page.open(address)
            #expect(try await page.text("#signed-in-as") == "ada")
            // The token's expiry (the link's, an hour away) is shown.
            let expiry = try #require(try await page.evaluate("Number(document.querySelector('#token-expiry').dataset.exp)").doubleValue)
            let now = Date().timeIntervalSince1970
            #expect(expiry > now + 3000 && expiry <= now + 3601, "exp \(expiry), now \(now)")
            #expect(try await page.text("#token-expiry").hasPrefix("until "))
            // The token left the address bar.
            #expect(try await page.evaluate("location.hash") == "#/data/")
            // ada may not list `users` whole (the rules allow her own document only).
            #expect(try await page.text("#collections li").contains("No collection you may list"))
            try await page.fill("#goto", "users/ada")
            try await page.click("#goto + button")
            try await page.waitFor("document.querySelector(\"tr[data-field='name'] td.value\")?.textContent === '\"Ada\"'")
            try await Self.shoot(page, "console-signed-in.png")
            // bob's document is refused, and nothing of it shows.
            try await page.go("#/data/users/bob")
            try await page.waitFor("document.querySelector('#notice [data-code]')")
            #expect(try await page.evaluate("document.querySelector('#notice [data-code]').dataset.code") == "permission-denied")
            #expect(try await page.evaluate("document.body.textContent.includes(\"bob's\")") == false)
            // The metrics are for operators.
            try await page.go("#/server")
            try await page.waitFor("document.querySelector('#problem [data-code]')")
            #expect(try await page.evaluate("document.querySelector('#problem [data-code]').dataset.code") == "permission-denied")
            Self.expectOnlyServer(page, port: port)

            // Without a link the console asks for a token; a pasted one signs in.
            let ops = try await token("ops", ["admin=true"])
            try await Self.cli(["set", "users/ops/notes/1", #"{"text": "mine"}"#, "--token", ops], url: url)
            let other = try await browser.openPage()
            try await other.open("\(url)/console/")
            try await other.waitFor("document.querySelector('#token-form')")
            try await other.fill("#token-input", ops)
            try await other.click("#token-form button")
            #expect(try await other.text("#signed-in-as") == "ops")
            // An operator is shown every collection's name (docs/PROTOCOL.md §10), but the rules
            // still decide what it may list: `users`, which they do not let it list whole, is
            // shown as such, not as a link to a refusal; its own `notes` is a link.
            try await other.waitFor("document.querySelector(\"#collections li[data-unlisted='users']\")")
            #expect(try await other.evaluate("document.querySelector(\"#collections a[data-collection='users']\") === null") == true)
            try await other.go("#/data/users/ops")
            try await other.waitFor("document.querySelector(\"#subcollections a[data-collection='notes']\")")
            try await other.go("#/server")
            try await other.waitFor("document.querySelector('#uptime')")
            #expect(try await other.text("#server-access") == "token")
            Self.expectOnlyServer(other, port: port)
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }

    @Test("a token arriving in the fragment of a tab already on the console signs it in again; the token's expiry is shown, and past it the page says it is not live until a new token is pasted; a refused token and a non-token say so in words, never 'Signed in as ?'")
    func tokens() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let directory = TemporaryDirectory()
        let secret = "console-test-secret-console-test-secret"
        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.path, "--auth-secret", secret])
        defer { if server.process.isRunning { server.signal(SIGKILL) } }
        let line = try #require(await server.nextLine())
        let url = String(line.dropFirst("listening on ".count))
        let port = try #require(URL(string: url)?.port)
        func token(_ user: String, signedWith other: String? = nil, _ options: [String] = []) async throws -> String {
            let minted = try await CLIProcess.run(["token", "--sub", user, "--secret", other ?? secret] + options)
            try #require(minted.status == 0, "tandem token: \(minted.err)")
            return minted.out.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func consoleLink(_ user: String, _ options: [String] = []) async throws -> String {
            let link = try await CLIProcess.run(["console", "--as", user, "--secret", secret, "--url", url] + options)
            try #require(link.status == 0, "tandem console: \(link.err)")
            return link.out.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let ada = try await token("ada")
        try await Self.cli(["set", "users/ada", #"{"name": "Ada"}"#, "--token", ada], url: url)

        try await Self.withBrowser { browser in
            let page = try await browser.openPage()
            try await page.open(try await consoleLink("ada"))
            #expect(try await page.text("#signed-in-as") == "ada")
            try await page.go("#/data/users/ada")
            try await page.waitFor("document.querySelector('#live')?.dataset.status === 'live'")

            // `tandem console --as ops` opened in this tab: only the fragment differs, so the page
            // does not load again (what it held stays), and it signs in with the link's token,
            // takes it out of the address bar and shows again the page it showed.
            let link = try await consoleLink("ops", ["--claim", "admin=true"])
            let fragment = try #require(link.range(of: "#token="), "no token in \(link)")
            let opsToken = String(link[fragment.upperBound...])
            try await page.evaluate("window.beforeTheLink = true")
            try await page.navigate(link)
            try await page.waitFor("document.querySelector('#signed-in-as')?.textContent === 'ops'")
            #expect(try await page.evaluate("window.beforeTheLink === true") == true, "the link loaded the page again, so it did not test a tab already on the console")
            #expect(try await page.evaluate("location.hash") == "#/data/users/ada")
            #expect(try await page.evaluate("sessionStorage.getItem('tandem.token')") == .string(opsToken))
            // The rules do not let ops read ada's document, and the page, now ops', says so.
            try await page.waitFor("document.querySelector('#notice [data-code]')?.dataset.code === 'permission-denied'")

            // A token signed with another secret: the server refuses it, and the page says why,
            // signs no one in, and is not live.
            try await page.click("#new-token")
            try await page.fill("#token-input", try await token("mallory", signedWith: "another-secret-another-secret-another-secret"))
            try await page.click("#token-form button")
            try await page.waitFor("document.querySelector('#token-problem')?.dataset.kind === 'refused'")
            let refusal = try await page.text("#token-problem")
            #expect(refusal.hasPrefix("The token was refused: ") && refusal.contains("signature"), "\(refusal)")
            #expect(try await page.evaluate("document.querySelector('#signed-in-as') === null && !document.querySelector('#access').textContent.includes('Signed in')") == true)
            #expect(try await page.evaluate("document.querySelector('#live').dataset.status") == "refused")
            #expect(try await page.text("#live").hasPrefix("not live"))

            // Something that is not a token at all.
            try await page.fill("#token-input", "not-a-token")
            try await page.click("#token-form button")
            try await page.waitFor("document.querySelector('#token-problem')?.textContent.startsWith('Not a token')")
            #expect(try await page.evaluate("document.querySelector('#signed-in-as') === null") == true)
            #expect(try await page.text("#live").hasPrefix("not live"))

            // A token that expires while the page is open: live until its `exp`, then not live
            // (the page's listeners stopped), until a new token is pasted. The wait is for the
            // expiry itself, on the wall clock the server checks tokens with.
            try await page.fill("#token-input", try await token("ada", ["--ttl", "8"]))
            try await page.click("#token-form button")
            try await page.waitFor("document.querySelector('#live')?.dataset.status === 'live'")
            let expiry = try #require(try await page.evaluate("Number(document.querySelector('#token-expiry').dataset.exp)").doubleValue)
            #expect(expiry <= Date().timeIntervalSince1970 + 8)
            try await page.waitFor("document.querySelector('#live')?.dataset.status === 'expired'")
            #expect(try await page.text("#live").hasPrefix("not live"))
            #expect(try await page.text("#token-problem").hasPrefix("ada's token expired"))
            try await page.fill("#token-input", ada)
            try await page.click("#token-form button")
            // The page is shown anew for the new token: its document arrives, then a change does.
            try await page.waitFor("document.querySelector(\"tr[data-field='name'] td.value\")?.textContent === '\"Ada\"'")
            #expect(try await page.evaluate("document.querySelector('#live').dataset.status") == "live")
            #expect(try await page.text("#signed-in-as") == "ada")
            try await Self.cli(["update", "users/ada", #"{"visits": 1}"#, "--token", ada], url: url)
            try await page.waitFor("document.querySelector(\"tr.changed[data-field='visits']\")")

            Self.expectOnlyServer(page, port: port)
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }

    @Test("create a document in a collection (never over another), edit a whole document as JSON with the version shown as precondition (text that is not JSON and a concurrent change are reported, nothing overwritten), and edit an array's items")
    func createAndEditJSON() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let directory = TemporaryDirectory()
        let (server, url) = try await CLITests.serve(directory.url)
        defer { if server.process.isRunning { server.signal(SIGKILL) } }
        let port = try #require(URL(string: url)?.port)
        try await Self.cli(["set", "users/ada", #"{"name": "Ada", "tags": ["math", "code"], "n": 1}"#], url: url)

        try await Self.withBrowser { browser in
            let page = try await browser.openPage()
            try await page.open("\(url)/console/#/data/users")
            try await page.waitFor("document.querySelectorAll('#documents tr[data-path]').length === 1")

            // Create a document with an id: it arrives in the list.
            try await page.fill("#new-id", "eve")
            try await page.fill("#new-body", #"{"name": "Eve", "age": 30}"#)
            try await page.click("#create-document")
            try await page.waitFor("document.querySelector(\"#create-outcome [data-created='users/eve']\")")
            try await page.waitFor("document.querySelector(\"#documents tr[data-path='users/eve']\")")
            #expect(try await Self.stored("users/eve", url: url)?[field: "data"] == .object(["name": .string("Eve"), "age": .int(30)]))

            // The same id again: refused, the document left as it is.
            try await page.fill("#new-id", "eve")
            try await page.fill("#new-body", #"{"name": "Not Eve"}"#)
            try await page.click("#create-document")
            try await page.waitFor("document.querySelector('#create-outcome [data-kind=error]')")
            #expect(try await page.text("#create-outcome").contains("left as it is"))
            #expect(try await Self.stored("users/eve", url: url)?[field: "data"]?[field: "name"] == "Eve")

            // A body that is not JSON is refused on the page; no id gives a random one.
            try await page.fill("#new-body", #"{"name": }"#)
            try await page.click("#create-document")
            try await page.waitFor("document.querySelector('#create-outcome')?.textContent.includes('not JSON')")
            try await page.fill("#new-id", "")
            try await page.fill("#new-body", #"{"random": true}"#)
            try await page.click("#create-document")
            let created = try #require(try await page.waitFor("document.querySelector('#create-outcome [data-created]')?.dataset.created").stringValue)
            let id = created.dropFirst("users/".count)
            #expect(created.hasPrefix("users/") && id.count == 20 && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }, "\(created)")
            #expect(try await Self.stored(created, url: url)?[field: "data"] == .object(["random": .bool(true)]))
            try await page.waitFor("document.querySelectorAll('#documents tr[data-path]').length === 3")

            // The whole document as JSON, indented, as the page shows it.
            try await page.go("#/data/users/ada")
            try await page.waitFor("document.querySelector('#version')?.textContent === '1'")
            try await page.click("#edit-json")
            let text = try #require(try await page.evaluate("document.querySelector('#json-editor').value").stringValue)
            #expect(try JSONText.parse(text) == .object(["name": .string("Ada"), "tags": .array([.string("math"), .string("code")]), "n": .int(1)]))
            #expect(text.contains("\n  \"name\": \"Ada\""), "\(text)")

            // Saved whole, with the version shown as precondition; an integer past 2^53 keeps
            // every digit.
            try await page.fill("#json-editor", #"{"name": "Ada L.", "tags": ["math"], "n": 9007199254740993}"#)
            try await page.click("#save-json")
            try await page.waitFor("document.querySelector('#notice [data-kind=notice]')")
            var ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"] == .object(["name": .string("Ada L."), "tags": .array([.string("math")]), "n": .int(9_007_199_254_740_993)]))
            #expect(try await page.text("#version") == ada[field: "version"]?.intValue.map(String.init))

            // Text that is not JSON is refused where it was typed, and nothing is sent.
            try await page.click("#edit-json")
            try await page.fill("#json-editor", #"{"name": "#)
            try await page.click("#save-json")
            try await page.waitFor("document.querySelector('#json-problem [data-kind=parse]')")
            #expect(try await page.text("#json-problem").contains("not JSON"))

            // A change from elsewhere while the JSON is edited: announced, saving is refused by
            // the precondition and overwrites nothing, and what was typed is kept.
            try await page.fill("#json-editor", #"{"name": "Mine"}"#)
            try await Self.cli(["update", "users/ada", #"{"n": 2}"#], url: url)
            try await page.waitFor("document.querySelector('#notice [data-kind=stale]')")
            try await page.click("#save-json")
            try await page.waitFor("document.querySelector('#notice [data-kind=error]')")
            #expect(try await page.text("#notice").contains("Nothing was overwritten"))
            ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"] == .object(["name": .string("Ada L."), "tags": .array([.string("math")]), "n": .int(2)]))
            #expect(try await page.evaluate("document.querySelector('#json-editor').value") == #"{"name": "Mine"}"#)
            try await page.click("#cancel-json")
            try await page.waitFor("document.querySelector(\"tr[data-field='n'] td.value\")?.textContent === '2'")

            // An array's items: edit one, add one (a map), delete one; each a write of the array
            // with the version shown as precondition.
            try await page.click("tr[data-array='tags'][data-item='0'] .edit")
            try await page.fill("tr[data-array='tags'][data-item='0'] .edit-value", #""logic""#)
            try await page.click("tr[data-array='tags'][data-item='0'] .save")
            try await page.waitFor("document.querySelector(\"tr[data-array='tags'][data-item='0'] td.value\")?.textContent === '\"logic\"'")
            try await page.click("tr[data-field='tags'] .add-item")
            try await page.fill("tr[data-field='tags'] .edit-value", #"{"level": 2}"#)
            try await page.click("tr[data-field='tags'] .save")
            try await page.waitFor("document.querySelector(\"tr[data-array='tags'][data-item='1'] td.type\")?.textContent === 'map'")
            ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"]?[field: "tags"] == .array([.string("logic"), .object(["level": .int(2)])]))
            try await page.click("tr[data-array='tags'][data-item='0'] .remove")
            try await page.waitFor("document.querySelectorAll(\"tr[data-array='tags']\").length === 1")
            ada = try #require(try await Self.stored("users/ada", url: url))
            #expect(ada[field: "data"]?[field: "tags"] == .array([.object(["level": .int(2)])]))

            Self.expectOnlyServer(page, port: port)
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }
}
