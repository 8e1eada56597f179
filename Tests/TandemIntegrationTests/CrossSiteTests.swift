import Foundation
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// An open server on 127.0.0.1 against the web pages its developer opens: a page elsewhere can
/// neither write (a plain-text `POST` needs no preflight) nor open the stream (browsers apply no
/// cross-origin rule to WebSockets), nor reach it under its own name (DNS rebinding). Native
/// clients, which send no `Origin`, and the server's own console are not affected.
@Suite("Cross-site requests", .timeLimit(.minutes(5)))
struct CrossSiteTests {
    static func exchange(_ port: Int, _ request: String) async throws -> RawResponse {
        let connection = try await RawConnection.open(port: port)
        try await connection.send(request)
        let response = try #require(RawResponse(try await connection.readResponse()))
        await connection.close()
        return response
    }

    static func commit(_ port: Int, host: String? = nil, origin: String?, type: String?, path: String) -> String {
        let body = #"{"writes":[{"op":"set","path":"\#(path)","data":{"pwned":true}}]}"#
        return "POST /v1/commit HTTP/1.1\r\nHost: \(host ?? "127.0.0.1:\(port)")\r\n" + (origin.map { "Origin: \($0)\r\n" } ?? "")
            + (type.map { "Content-Type: \($0)\r\n" } ?? "") + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    static func upgrade(_ port: Int, origin: String?) -> String {
        "GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            + (origin.map { "Origin: \($0)\r\n" } ?? "") + "\r\n"
    }

    @Test("a foreign Origin may not write or upgrade (403), a body not declared JSON is refused (415), a foreign Host is refused (421); nothing is written, native clients and the server's own origin go on")
    func refusals() async throws {
        let server = try await LiveServer.start()
        let port = server.port
        // The reproduction: a page's plain-text POST.
        var response = try await Self.exchange(port, Self.commit(port, origin: "https://evil.example", type: "text/plain", path: "csrf/x"))
        #expect(response.status == 403 && response.errorCode == "permission-denied", "\(response)")
        #expect(response.body.contains("--allow-origin"))
        response = try await Self.exchange(port, Self.commit(port, origin: nil, type: "text/plain", path: "csrf/y"))
        #expect(response.status == 415 && response.errorCode == "invalid-argument", "\(response)")
        response = try await Self.exchange(port, Self.commit(port, origin: nil, type: nil, path: "csrf/z"))
        #expect(response.status == 415, "\(response)")
        // DNS rebinding: the page's own name, pointed at 127.0.0.1.
        response = try await Self.exchange(port, Self.commit(port, host: "rebound.evil.example:\(port)", origin: nil, type: "application/json", path: "csrf/w"))
        #expect(response.status == 421, "\(response)")
        response = try await Self.exchange(port, "GET /v1/documents/csrf/x HTTP/1.1\r\nHost: rebound.evil.example\r\n\r\n")
        #expect(response.status == 421, "\(response)")
        // The stream's upgrade from another page, and from the server's own.
        response = try await Self.exchange(port, Self.upgrade(port, origin: "https://evil.example"))
        #expect(response.status == 403, "\(response)")
        response = try await Self.exchange(port, Self.upgrade(port, origin: "http://127.0.0.1:\(port)"))
        #expect(response.status == 101, "\(response)")
        for path in ["csrf/x", "csrf/y", "csrf/z", "csrf/w"] {
            #expect(try await server.store.document(at: DocumentPath(path)) == nil, "\(path) was written")
        }
        // A native client (no Origin) and the console's own origin write as before.
        response = try await Self.exchange(port, Self.commit(port, origin: nil, type: "application/json", path: "native/a"))
        #expect(response.status == 200, "\(response)")
        response = try await Self.exchange(port, Self.commit(port, host: "localhost:\(port)", origin: "http://localhost:\(port)", type: "application/json; charset=utf-8", path: "console/a"))
        #expect(response.status == 200 && response.headers["access-control-allow-origin"] == nil, "\(response)")
        await server.stop()
    }

    @Test("a request pipelined behind a refused one is not served: the refusal closes the connection once the answers before it are written")
    func pipelinedBehindARefusal() async throws {
        let server = try await LiveServer.start()
        let connection = try await RawConnection.open(port: server.port)
        let body = "{}"
        try await connection.send("GET /v1/documents/a/b HTTP/1.1\r\nHost: localhost\r\n\r\n"
            + "GET /health HTTP/1.1\r\nHost: rebound.evil.example\r\n\r\n"
            + "PUT /v1/documents/a/c HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let text = try await connection.readUntilClosed()
        #expect(text.components(separatedBy: "HTTP/1.1 ").count == 3 && text.contains("HTTP/1.1 404") && text.contains("HTTP/1.1 421"), "\(text)")
        #expect(try await server.store.document(at: DocumentPath("a/c")) == nil, "the write behind the refusal was applied")
        await server.stop()
    }

    @Test("an allowed origin writes, opens streams, reads its answers (CORS) and passes the browser's preflight")
    func allowedOrigin() async throws {
        var configuration = SyncServerConfiguration()
        configuration.allowedOrigins = ["https://app.example"]
        let server = try await LiveServer.start(configuration: configuration)
        let port = server.port
        var response = try await Self.exchange(port, Self.commit(port, origin: "https://app.example", type: "application/json", path: "app/a"))
        #expect(response.status == 200 && response.headers["access-control-allow-origin"] == "https://app.example" && response.headers["vary"] == "Origin", "\(response)")
        response = try await Self.exchange(port, "OPTIONS /v1/commit HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type, authorization\r\n\r\n")
        #expect(response.status == 204 && response.headers["access-control-allow-origin"] == "https://app.example", "\(response)")
        #expect(response.headers["access-control-allow-methods"]?.contains("POST") == true && response.headers["access-control-allow-headers"] == "Authorization, Content-Type")
        response = try await Self.exchange(port, Self.upgrade(port, origin: "https://app.example"))
        #expect(response.status == 101, "\(response)")
        // Its host is answered as this server's name too (the page's name may point here).
        response = try await Self.exchange(port, "GET /health HTTP/1.1\r\nHost: app.example\r\n\r\n")
        #expect(response.status == 200, "\(response)")
        // Another origin still gets nothing.
        response = try await Self.exchange(port, Self.commit(port, origin: "https://evil.example", type: "application/json", path: "app/b"))
        #expect(response.status == 403, "\(response)")
        response = try await Self.exchange(port, "OPTIONS /v1/commit HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
        #expect(response.headers["access-control-allow-origin"] == nil, "\(response)")
        #expect(try await server.store.document(at: DocumentPath("app/a")) != nil)
        #expect(try await server.store.document(at: DocumentPath("app/b")) == nil)
        await server.stop()
    }

    /// What a page on `page`'s origin manages against `target`: a write by a plain-text POST, a
    /// read by fetch, and a stream opened and read.
    static func attempts(from page: BrowserPage, against target: Int) async throws -> (write: String, read: String, stream: String) {
        let hello = ClientMessage.hello(clientID: "page", protocolVersion: TandemVersion.wireProtocol, token: nil).text
        let write = try await page.evaluate("""
            fetch('http://127.0.0.1:\(target)/v1/commit', {method: 'POST', headers: {'Content-Type': 'text/plain'},
              body: JSON.stringify({writes: [{op: 'set', path: 'pages/plain', data: {pwned: true}}]})})
              .then(r => 'status ' + r.status, e => 'failed')
            """).stringValue ?? ""
        let read = try await page.evaluate("""
            fetch('http://127.0.0.1:\(target)/v1/documents/secrets/s').then(r => r.text(), e => 'failed')
            """).stringValue ?? ""
        let stream = try await page.evaluate("""
            new Promise(resolve => {
              const socket = new WebSocket('ws://127.0.0.1:\(target)/v1/stream');
              socket.onopen = () => socket.send(\(BrowserPage.quoted(hello)));
              socket.onmessage = event => { resolve('read ' + event.data); socket.close(); };
              socket.onerror = () => resolve('refused');
              socket.onclose = () => resolve('closed');
            })
            """).stringValue ?? ""
        return (write, read, stream)
    }

    @Test("in a real browser, a page on another origin can neither read nor write a local open server; once its origin is allowed, it can",
          .enabled(if: Browser.runs, "No Chromium here: install Debian's chromium package to run the browser tests"))
    func inTheBrowser() async throws {
        // The page's origin: another server, another port.
        let elsewhere = try await LiveServer.start()
        let target = try await LiveServer.start()
        _ = try await target.store.commit([.set(DocumentPath("secrets/s"), ["code": "1234"])])
        let browser = try await Browser.launch()
        do {
            let page = try await browser.openPage()
            try await page.open("http://127.0.0.1:\(elsewhere.port)/health")
            let refused = try await Self.attempts(from: page, against: target.port)
            #expect(refused.read == "failed", "the page read \(refused.read)")
            #expect(refused.stream == "refused" || refused.stream == "closed", "the page's stream: \(refused.stream)")
            #expect(try await target.store.document(at: DocumentPath("pages/plain")) == nil, "the page wrote (\(refused.write))")

            // The same page, its origin allowed: the harness does reach the server.
            await target.stop()
            var configuration = SyncServerConfiguration()
            configuration.allowedOrigins = ["http://127.0.0.1:\(elsewhere.port)"]
            let allowing = try await LiveServer.start(store: target.store, configuration: configuration)
            let allowed = try await Self.attempts(from: page, against: allowing.port)
            #expect(allowed.read.contains("1234"), "\(allowed.read)")
            #expect(allowed.stream.hasPrefix("read ") && allowed.stream.contains("welcome"), "\(allowed.stream)")
            // Plain text is still no JSON: refused, the page told why.
            #expect(allowed.write == "status 415", "\(allowed.write)")
            await allowing.stop()
        } catch {
            await browser.close()
            await elsewhere.stop()
            throw error
        }
        await browser.close()
        await elsewhere.stop()
    }
}
