import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// The console's files over plain HTTP, without a browser: headers, ranges, and refusals in the
/// API's error shape.
@Suite("Console files", .timeLimit(.minutes(5)))
struct ConsoleFilesTests {
    func get(_ server: LiveServer, _ path: String, headers: [String: String] = [:]) async throws -> (HTTPURLResponse, Data) {
        var request = URLRequest(url: URL(string: server.url.absoluteString + path)!)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return (response as! HTTPURLResponse, data)
    }

    @Test("the page, its policy, a byte range, a range past the end (416 with the size), and an unknown file")
    func files() async throws {
        let server = try await LiveServer.start()
        let script = try #require(ConsoleFiles.bundled.files["/console.js"])

        var (response, body) = try await get(server, "/console/")
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/html") == true)
        #expect(response.value(forHTTPHeaderField: "Content-Security-Policy")?.contains("connect-src 'self'") == true)
        #expect(response.value(forHTTPHeaderField: "X-Content-Type-Options") == "nosniff")
        #expect(String(decoding: body, as: UTF8.self).contains("<html"))

        (response, body) = try await get(server, "/console/console.js", headers: ["Range": "bytes=0-9"])
        #expect(response.statusCode == 206)
        #expect(Array(body) == Array(script.prefix(10)))

        (response, body) = try await get(server, "/console/console.js", headers: ["Range": "bytes=\(script.count + 100)-\(script.count + 200)"])
        #expect(response.statusCode == 416)
        #expect(response.value(forHTTPHeaderField: "Content-Range") == "bytes */\(script.count)")
        let refusal = try JSONText.parse(String(decoding: body, as: UTF8.self))
        #expect(refusal[field: "error"]?[field: "code"] == "out-of-range")

        (response, body) = try await get(server, "/console/nothing-here.js")
        #expect(response.statusCode == 404)
        #expect(try JSONText.parse(String(decoding: body, as: UTF8.self))[field: "error"]?[field: "code"] == "not-found")
        await server.stop()
    }
}
