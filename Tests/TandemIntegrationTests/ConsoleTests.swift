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
            #expect(try await page.evaluate("document.querySelector('#access').textContent") == "Signed in as adaSign out")
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
            let other = try await browser.openPage()
            try await other.open("\(url)/console/")
            try await other.waitFor("document.querySelector('#token-form')")
            try await other.fill("#token-input", try await token("ops", ["admin=true"]))
            try await other.click("#token-form button")
            #expect(try await other.text("#signed-in-as") == "ops")
            try await other.go("#/server")
            try await other.waitFor("document.querySelector('#uptime')")
            #expect(try await other.text("#server-access") == "token")
            Self.expectOnlyServer(other, port: port)
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }
}
