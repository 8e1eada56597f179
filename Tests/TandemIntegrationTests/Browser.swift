import Foundation
import TandemTesting
import Logging
import Synchronization
import TandemCore
import WSClient

/// Headless Chromium, driven over the DevTools protocol on its WebSocket: the console's tests open
/// pages in it, click and type as a user does, and record every request the pages make.
///
/// Where no Chromium is installed the tests that need it are skipped, saying why, unless
/// `TANDEM_REQUIRE_BROWSER` is set (CI sets it): then they fail.
final class Browser: Sendable {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// An event the browser sent: its method, parameters, and the page session it came from.
    struct Event: Sendable {
        var method: String
        var params: JSONValue
        var session: String?
    }

    private struct State {
        var nextID = 1
        var answers: [Int: CheckedContinuation<JSONValue, any Error>] = [:]
        var eventWaiters: [(method: String, session: String?, continuation: CheckedContinuation<Event, any Error>)] = []
        var events: [Event] = []
        var ended: String?
    }

    /// The connection's bookkeeping, shared with its reading task.
    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    private let shared = Shared()
    private let outgoing: AsyncStream<String>.Continuation
    private let pid: Int32
    private let exited: Exit
    private let directory: TemporaryDirectory
    private let connection: Task<Void, Never>

    /// The Chromium program: Debian's binary itself (not its wrapper script, so stopping it stops
    /// the browser), else one on PATH.
    static var executable: URL? {
        var candidates = ["/usr/lib/chromium/chromium"]
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        for directory in path.split(separator: ":") {
            for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] { candidates.append("\(directory)/\(name)") }
        }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }.map { URL(filePath: $0) }
    }

    /// Whether the browser tests run here: a browser is installed, or CI requires one (and the
    /// tests then fail saying it is missing).
    static var runs: Bool {
        executable != nil || ProcessInfo.processInfo.environment["TANDEM_REQUIRE_BROWSER"] != nil
    }

    /// Starts a headless browser with a profile of its own and connects to it.
    static func launch() async throws -> Browser {
        guard let executable else {
            throw Failure(description: "No Chromium here: install Debian's chromium package (apt-get install chromium).")
        }
        let directory = TemporaryDirectory()
        let process = ChildSpawn()
        process.executableURL = executable
        process.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*",
            "--user-data-dir=\(directory.url.path)", "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
            "--window-size=1200,800", "about:blank",
        ]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        let exited = Exit()
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        let lines = Lines(errors.fileHandleForReading)
        try process.run()
        var said: [String] = []
        var endpoint: String?
        while let line = await lines.next() {
            if let range = line.range(of: "DevTools listening on ") {
                endpoint = String(line[range.upperBound...]).trimmingCharacters(in: .whitespaces)
                break
            }
            said.append(line)
        }
        guard let endpoint else {
            throw Failure(description: "Chromium stopped before it listened: \(said.suffix(5).joined(separator: " | "))")
        }
        return Browser(endpoint: endpoint, pid: process.processIdentifier, exited: exited, directory: directory)
    }

    private init(endpoint: String, pid: Int32, exited: Exit, directory: TemporaryDirectory) {
        self.pid = pid
        self.exited = exited
        self.directory = directory
        let (messages, outgoing) = AsyncStream<String>.makeStream()
        self.outgoing = outgoing
        let shared = self.shared
        connection = Task {
            var configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 26)
            configuration.closeTimeout = .seconds(1)
            let client = WebSocketClient(url: endpoint, configuration: configuration, logger: Logger(label: "tandem.tests.browser")) { inbound, outbound, _ in
                await withTaskGroup { group in
                    group.addTask {
                        for await text in messages { try? await outbound.writeTextMessage(text) }
                    }
                    do {
                        for try await message in inbound.messages(maxSize: 1 << 26) {
                            if case .text(let text) = message { Self.receive(text, shared: shared) }
                        }
                    } catch {}
                    group.cancelAll()
                }
            }
            var reason = "the browser's connection closed"
            do { try await client.run() } catch { reason = "the browser's connection failed: \(error)" }
            Self.end(shared, reason)
        }
    }

    private static func receive(_ text: String, shared: Shared) {
        guard let message = try? JSONText.parse(text) else { return }
        if let id = message[field: "id"]?.intValue {
            guard let waiter = shared.state.withLock({ $0.answers.removeValue(forKey: id) }) else { return }
            if let error = message[field: "error"] {
                waiter.resume(throwing: Failure(description: "DevTools refused: \(JSONText.encode(error))"))
            } else {
                waiter.resume(returning: message[field: "result"] ?? .null)
            }
            return
        }
        guard let method = message[field: "method"]?.stringValue else { return }
        let event = Event(method: method, params: message[field: "params"] ?? .null, session: message[field: "sessionId"]?.stringValue)
        let woken = shared.state.withLock { state -> [CheckedContinuation<Event, any Error>] in
            state.events.append(event)
            var woken: [CheckedContinuation<Event, any Error>] = []
            state.eventWaiters.removeAll { waiter in
                guard waiter.method == method, waiter.session == event.session else { return false }
                woken.append(waiter.continuation)
                return true
            }
            return woken
        }
        woken.forEach { $0.resume(returning: event) }
    }

    private static func end(_ shared: Shared, _ reason: String) {
        let (answers, waiters) = shared.state.withLock { state in
            state.ended = reason
            defer { state.answers = [:]; state.eventWaiters = [] }
            return (Array(state.answers.values), state.eventWaiters.map { $0.continuation })
        }
        answers.forEach { $0.resume(throwing: Failure(description: reason)) }
        waiters.forEach { $0.resume(throwing: Failure(description: reason)) }
    }

    /// Sends a DevTools command (to a page when `session` is given) and returns its result.
    @discardableResult
    func send(_ method: String, _ params: JSONObject = [:], session: String? = nil) async throws -> JSONValue {
        try await withCheckedThrowingContinuation { continuation in
            let id = shared.state.withLock { state -> Int? in
                if state.ended != nil { return nil }
                defer { state.nextID += 1 }
                state.answers[state.nextID] = continuation
                return state.nextID
            }
            guard let id else {
                continuation.resume(throwing: Failure(description: shared.state.withLock { $0.ended } ?? "ended"))
                return
            }
            var message: JSONObject = ["id": .int(id), "method": .string(method), "params": .object(params)]
            if let session { message["sessionId"] = .string(session) }
            outgoing.yield(JSONText.encode(.object(message)))
        }
    }

    /// Registers a waiter for the next `method` event synchronously, and returns a way to await it.
    func expectEvent(_ method: String, session: String?) async -> () async throws -> Event {
        let ready = Exit()
        let task = Task {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Event, any Error>) in
                let ended = shared.state.withLock { state -> String? in
                    if let ended = state.ended { return ended }
                    state.eventWaiters.append((method, session, continuation))
                    return nil
                }
                ready.fire(0)
                if let ended { continuation.resume(throwing: Failure(description: ended)) }
            }
        }
        _ = await ready.wait()
        return { try await task.value }
    }

    /// Every event so far from `session`.
    func events(session: String) -> [Event] {
        shared.state.withLock { $0.events.filter { $0.session == session } }
    }

    /// Opens a new page (a tab) with its page, network and runtime events on.
    func openPage(width: Int = 1200, height: Int = 800) async throws -> BrowserPage {
        let target = try await send("Target.createTarget", ["url": "about:blank"])
        guard let targetID = target[field: "targetId"]?.stringValue else { throw Failure(description: "no target id in \(JSONText.encode(target))") }
        let attached = try await send("Target.attachToTarget", ["targetId": .string(targetID), "flatten": true])
        guard let session = attached[field: "sessionId"]?.stringValue else { throw Failure(description: "no session id in \(JSONText.encode(attached))") }
        for domain in ["Page", "Network", "Runtime", "Log"] {
            try await send("\(domain).enable", session: session)
        }
        try await send("Emulation.setDeviceMetricsOverride", ["width": .int(width), "height": .int(height), "deviceScaleFactor": 1, "mobile": false], session: session)
        return BrowserPage(browser: self, session: session)
    }

    /// Stops the browser and deletes its profile.
    func close() async {
        kill(pid, SIGTERM)
        _ = await exited.wait()
        outgoing.finish()
        connection.cancel()
        _ = directory
    }
}

/// One page of a ``Browser``.
struct BrowserPage: Sendable {
    let browser: Browser
    let session: String

    /// Loads `url` and returns once its load event has fired.
    func open(_ url: String) async throws {
        let loaded = await browser.expectEvent("Page.loadEventFired", session: session)
        try await browser.send("Page.navigate", ["url": .string(url)], session: session)
        _ = try await loaded()
    }

    /// Runs JavaScript in the page, awaiting a promise it returns, and returns its value as JSON.
    @discardableResult
    func evaluate(_ expression: String) async throws -> JSONValue {
        let answer = try await browser.send("Runtime.evaluate", ["expression": .string(expression), "awaitPromise": true, "returnByValue": true], session: session)
        if let exception = answer[field: "exceptionDetails"] {
            throw Browser.Failure(description: "the page threw: \(JSONText.encode(exception[field: "exception"]?[field: "description"] ?? exception))")
        }
        return answer[field: "result"]?[field: "value"] ?? .null
    }

    /// Waits until the JavaScript `condition` is truthy, checking it whenever the page's document
    /// changes (a `MutationObserver`, not a timer), and returns its value. A condition still false
    /// after a minute fails, naming itself: a guard against hanging, not a measure of speed.
    @discardableResult
    func waitFor(_ condition: String) async throws -> JSONValue {
        try await evaluate("""
            new Promise((resolve, reject) => {
              let guard;
              const check = () => { let value; try { value = (\(condition)); } catch (_) {} if (value) { observer.disconnect(); clearTimeout(guard); resolve(value); return true; } return false; };
              const observer = new MutationObserver(check);
              if (!check()) {
                observer.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
                guard = setTimeout(() => { observer.disconnect(); reject(new Error('still false after a minute: ' + \(Self.quoted(condition)) + ' (page: ' + document.querySelector('main')?.textContent.slice(0, 300) + ')')); }, 60000);
              }
            })
            """)
    }

    /// The text of the first element matching `selector` once there is one.
    func text(_ selector: String) async throws -> String {
        try await waitFor("document.querySelector(\(Self.quoted(selector)))?.textContent").stringValue ?? ""
    }

    /// Clicks the first element matching `selector`, once there is one.
    func click(_ selector: String) async throws {
        try await waitFor("document.querySelector(\(Self.quoted(selector)))")
        try await evaluate("document.querySelector(\(Self.quoted(selector))).click()")
    }

    /// Types `text` into the field matching `selector` (replacing what it held), as a user would.
    func fill(_ selector: String, _ text: String) async throws {
        try await waitFor("document.querySelector(\(Self.quoted(selector)))")
        try await evaluate("""
            (() => { const field = document.querySelector(\(Self.quoted(selector))); field.focus(); field.value = ''; return true; })()
            """)
        try await browser.send("Input.insertText", ["text": .string(text)], session: session)
    }

    /// Opens `url` in this page as the address bar or a link does, without waiting for a load: an
    /// address that differs from the page's only in its fragment loads nothing (the page is told
    /// with a `hashchange`), so there is none to wait for. Wait for what the page does instead.
    func navigate(_ url: String) async throws {
        try await browser.send("Page.navigate", ["url": .string(url)], session: session)
    }

    /// Goes to a fragment of the current page (`#/data/users`), as a link does.
    func go(_ fragment: String) async throws {
        try await evaluate("location.hash = \(Self.quoted(fragment))")
    }

    /// Writes a PNG of what the page shows to `file`.
    func screenshot(to file: URL) async throws {
        let shot = try await browser.send("Page.captureScreenshot", ["format": "png"], session: session)
        guard let data = shot[field: "data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { throw Browser.Failure(description: "no screenshot data") }
        try data.write(to: file)
    }

    /// Every URL the page asked for: documents, scripts, styles, images, fetches and WebSockets.
    func requestedURLs() -> [String] {
        browser.events(session: session).compactMap { event in
            switch event.method {
            case "Network.requestWillBeSent": event.params[field: "request"]?[field: "url"]?.stringValue
            case "Network.webSocketCreated": event.params[field: "url"]?.stringValue
            default: nil
            }
        }
    }

    /// What the page threw or logged as an error.
    func problems() -> [String] {
        browser.events(session: session).compactMap { event in
            switch event.method {
            case "Runtime.exceptionThrown": JSONText.encode(event.params[field: "exceptionDetails"] ?? .null)
            // Not the network's: an answer such as 412 is logged as an error, and is expected.
            case "Log.entryAdded" where event.params[field: "entry"]?[field: "level"]?.stringValue == "error"
                && event.params[field: "entry"]?[field: "source"]?.stringValue != "network":
                JSONText.encode(event.params[field: "entry"] ?? .null)
            default: nil
            }
        }
    }

    static func quoted(_ text: String) -> String { JSONText.encode(.string(text)) }
}
