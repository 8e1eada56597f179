import Foundation
import Hummingbird
import NIOCore
import TandemCore

/// The web console's files (HTML, CSS, JavaScript), read once from the package's resources into
/// memory and served from there at `/console` by Hummingbird's `FileMiddleware`, whatever
/// directory the server runs in.
///
/// The files ship in the `Console` folder of the `TandemServer` target's resource bundle, which
/// SwiftPM puts beside the executable. They are looked for there, then in the source tree the
/// server was built from; a server that finds neither answers `/console` with a `not-found` that
/// says so, and serves everything else as before.
public struct ConsoleFiles: Sendable {
    /// The files by path under `/console` ("/index.html").
    public let files: [String: [UInt8]]
    /// Where they were read from.
    public let directory: URL?
    let modified: Date

    /// The console's files, read once per process.
    public static let bundled: ConsoleFiles = ConsoleFiles(directory: locate())

    /// Reads every file under `directory` (none when nil or unreadable).
    public init(directory: URL?) {
        var files: [String: [UInt8]] = [:]
        if let directory, let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) {
            for name in names where !name.hasPrefix(".") {
                if let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path) {
                    files["/" + name] = Array(data)
                }
            }
        }
        self.files = files
        self.directory = files.isEmpty ? nil : directory
        self.modified = Date()
    }

    /// The places the resource bundle lands: beside the executable (as `swift build` and `swift
    /// test` leave it), then the source tree (the folder this file is in).
    static func locate() -> URL? {
        var candidates: [URL] = []
        for base in [Bundle.main.bundleURL, Bundle.main.executableURL?.deletingLastPathComponent()].compactMap({ $0 }) {
            candidates.append(base.appendingPathComponent("Tandem_TandemServer.resources/Console"))
            candidates.append(base.appendingPathComponent("Tandem_TandemServer.bundle/Contents/Resources/Console"))
        }
        candidates.append(URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Console"))
        return candidates.first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("index.html").path) }
    }

    /// What a request for a path under `/console` is answered with when the files are missing.
    var missingMessage: String {
        "This server was built without its console's files (the Console folder of the Tandem_TandemServer resource bundle, which belongs beside the executable); reinstall it with them."
    }
}

/// ``ConsoleFiles`` as Hummingbird's `FileMiddleware` reads files.
struct ConsoleFileProvider: FileProvider {
    struct Attributes: FileMiddlewareFileAttributes {
        var isFolder: Bool
        var size: Int
        var modificationDate: Date
    }

    let console: ConsoleFiles

    func getFileIdentifier(_ path: String) -> String? { path }

    func getAttributes(id: String) async throws -> Attributes? {
        if id == "/" || id.isEmpty { return Attributes(isFolder: true, size: 0, modificationDate: console.modified) }
        guard let bytes = console.files[id] else { return nil }
        return Attributes(isFolder: false, size: bytes.count, modificationDate: console.modified)
    }

    func loadFile(id: String, context: some RequestContext) async throws -> ResponseBody {
        guard let bytes = console.files[id] else { throw HTTPError(.notFound) }
        return ResponseBody(byteBuffer: ByteBuffer(bytes: bytes))
    }

    func loadFile(id: String, range: ClosedRange<Int>, context: some RequestContext) async throws -> ResponseBody {
        guard let bytes = console.files[id], range.lowerBound >= 0, range.upperBound < bytes.count else { throw HTTPError(.rangeNotSatisfiable) }
        return ResponseBody(byteBuffer: ByteBuffer(bytes: bytes[range]))
    }
}

/// Serves the console under `/console`: its files, with a content security policy that lets the
/// page reach nothing but this server, and `/console` itself sent on to `/console/`.
struct ConsoleMiddleware<Context: RequestContext>: RouterMiddleware {
    let console: ConsoleFiles
    let files: FileMiddleware<Context, ConsoleFileProvider>
    let metrics: ServerMetrics?

    init(console: ConsoleFiles, metrics: ServerMetrics?) {
        self.console = console
        self.metrics = metrics
        files = FileMiddleware(fileProvider: ConsoleFileProvider(console: console), urlBasePath: "/console", cacheControl: .init([(MediaType(type: .any), [.noCache])]), searchForIndexHtml: true)
    }

    static var securityPolicy: String {
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/console" || path.hasPrefix("/console/"), request.method == .get || request.method == .head else {
            return try await next(request, context)
        }
        if path == "/console" { return .redirect(to: "/console/", type: .found) }
        do {
            guard !console.files.isEmpty else { throw TandemError(.notFound, console.missingMessage) }
            var response = try await files.handle(request, context: context, next: next)
            response.headers[.contentSecurityPolicy] = Self.securityPolicy
            response.headers[.xContentTypeOptions] = "nosniff"
            return response
        } catch let error as HTTPError {
            if error.status == .rangeNotSatisfiable {
                // 416, saying the file's size, as HTTP clients expect of a range past the end (the
                // API's own out-of-range, a change feed pruned, is 410).
                let answer = TandemError(.outOfRange, "The range asked for lies outside \(path).")
                metrics?.answered(answer)
                var response = HTTPAPI.json(.object(["error": answer.wireValue]), status: .rangeNotSatisfiable)
                if let size = console.files[String(path.utf8.dropFirst("/console".utf8.count))!]?.count {
                    response.headers[.contentRange] = "bytes */\(size)"
                }
                return response
            }
            let answer = switch error.status {
            case .notFound: TandemError(.notFound, "The console has no file at \(path); open /console/.")
            default: TandemError.invalidArgument("\(path) is not a path the console serves (\(error.status.code)).")
            }
            metrics?.answered(answer)
            return HTTPAPI.errorResponse(answer)
        } catch {
            let answer = SyncService.tandemError(error)
            metrics?.answered(answer)
            return HTTPAPI.errorResponse(answer)
        }
    }
}
