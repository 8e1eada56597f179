import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Hummingbird
import OpenAPIKit
import Testing
import TandemCore
@testable import TandemServer
import TandemTesting

/// The OpenAPI description of the HTTP API against the server itself: its routes, codes, reasons
/// and limits, the copy in `docs/`, and (with schemathesis) a fuzz run against live servers.
@Suite("OpenAPI description", .timeLimit(.minutes(5)))
struct OpenAPITests {
    static let repository = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("docs/openapi.json is the description the code builds (`swift run tandem openapi > docs/openapi.json` writes it again)")
    func repositoryCopy() throws {
        let file = try String(contentsOf: Self.repository.appendingPathComponent("docs/openapi.json"), encoding: .utf8)
        #expect(file == OpenAPIDescription.text(), "docs/openapi.json is out of date: run `swift run tandem openapi > docs/openapi.json`")
    }

    @Test("it is valid OpenAPI 3.1, and every reference in it resolves")
    func valid() throws {
        let document = try JSONDecoder().decode(OpenAPI.Document.self, from: Data(OpenAPIDescription.text().utf8))
        try document.validate()
        #expect(document.openAPIVersion == .v3_1_0)
        // Every $ref names a component that exists.
        let text = OpenAPIDescription.text()
        let components = try #require(OpenAPIDescription.document()[field: "components"]?.objectValue)
        for match in text.matches(of: /"\$ref": "#\/components\/(\w+)\/(\w+)"/) {
            #expect(components[String(match.1)]?.objectValue?[String(match.2)] != nil, "no component \(match.1)/\(match.2)")
        }
    }

    @Test("every route the server registers is described, with each method, and every described operation is a route")
    func routes() async throws {
        let store = MemoryServerStore(clock: ManualClock())
        let router = Router(context: CallerRequestContext.self)
        HTTPAPI(service: SyncService(store: store, hub: FanOutHub(store: store), limits: ServerLimits(), now: { .zero })).register(on: router)
        let registered = Set(router.routes.map { route in
            "\(route.method.rawValue) \(route.path.description.replacingOccurrences(of: "/**", with: "/{collection}/{id}"))"
        })
        let paths = try #require(OpenAPIDescription.document()[field: "paths"]?.objectValue)
        let described = Set(paths.flatMap { path, item in (item.objectValue ?? [:]).keys.map { "\($0.uppercased()) \(path)" } })
        #expect(!registered.isEmpty)
        #expect(registered.subtracting(described).isEmpty, "routes not described: \(registered.subtracting(described).sorted())")
        #expect(described.subtracting(registered).isEmpty, "described, not routes: \(described.subtracting(registered).sorted())")
        // The methods the error middleware lists for a path (405, OPTIONS) are the described ones.
        for (path, item) in paths {
            let concrete = path.replacingOccurrences(of: "{collection}", with: "a").replacingOccurrences(of: "{id}", with: "b")
            let methods = Set((item.objectValue ?? [:]).keys.map { $0.uppercased() })
            let allowed = Set(JSONErrorMiddleware.methods(for: concrete) ?? [])
            #expect(methods.isSubset(of: allowed), "\(path): the middleware allows \(allowed.sorted()), the description has \(methods.sorted())")
        }
    }

    @Test("every error code appears with the status the server answers it with, every reason, and every limit with the value the server uses")
    func codesAndLimits() async throws {
        let document = OpenAPIDescription.document()
        let errors = try #require(document[field: "x-tandem-errors"]?.objectValue)
        #expect(Set(errors.keys) == Set(TandemError.Code.all.map(\.rawValue)))
        for code in TandemError.Code.all {
            #expect(errors[code.rawValue] == .int(HTTPAPI.status(for: code).code), "\(code.rawValue)")
        }
        let body = document[field: "components"]?[field: "schemas"]?[field: "ErrorBody"]?[field: "properties"]
        #expect(body?[field: "code"]?[field: "enum"]?.arrayValue?.compactMap(\.stringValue) == TandemError.Code.all.map(\.rawValue))
        #expect(body?[field: "reason"]?[field: "enum"]?.arrayValue?.compactMap(\.stringValue) == TandemError.allReasons)
        // Every status an error can be answered with has a described response.
        let responses = try #require(document[field: "components"]?[field: "responses"]?.objectValue)
        for code in TandemError.Code.all where ![.internal, .unknown, .dataLoss, .cancelled, .unimplemented, .deadlineExceeded].contains(code) {
            #expect(responses[String(HTTPAPI.status(for: code).code)] != nil, "no response for \(code.rawValue)")
        }
        // Every limit, with its value; a server with other limits serves its own.
        var limits = ServerLimits()
        limits.maximumBatchWrites = 7
        limits.maximumDocumentBytes = 12_345
        let expected = Dictionary(uniqueKeysWithValues: Mirror(reflecting: limits).children.compactMap { child in
            child.label.map { ($0, JSONValue.int(child.value as! Int)) }
        })
        var configuration = SyncServerConfiguration()
        configuration.limits = limits
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()), configuration: configuration)
        let (data, response) = try await URLSession.shared.data(from: server.url.appendingPathComponent("v1/openapi.json"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let served = try JSONText.parse(bytes: data)
        #expect(served[field: "x-tandem-limits"]?.objectValue == expected)
        #expect(served[field: "paths"]?[field: "/v1/commit"]?[field: "post"]?[field: "requestBody"]?[field: "content"]?[field: "application/json"]?[field: "schema"]?[field: "properties"]?[field: "writes"]?[field: "maxItems"] == 7)
        await server.stop()
    }

    @Test("a document whose path has a '/' before a combining mark or an emoji modifier is written, read and fed back (it once read back as data-loss)")
    func pathsSplitAtBytes() async throws {
        let server = try await LiveServer.start()
        let path = "rooms/🏻x/notes/\u{301}e"
        var request = URLRequest(url: URL(string: server.url.absoluteString + "/v1/commit")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(JSONText.encode(["writes": [["op": "set", "path": .string(path), "data": ["n": 1]]]]).utf8)
        var (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        (data, response) = try await URLSession.shared.data(from: URL(string: server.url.absoluteString + "/v1/changes?since=0")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        #expect(try JSONText.parse(bytes: data)[field: "changes"]?.arrayValue?.first?[field: "path"] == .string(path))
        let stored = try await server.store.read(.collection(try CollectionPath("rooms/🏻x/notes"), Query()))
        #expect(stored.documents.map(\.path.description) == [path])
        await server.stop()
    }
}
