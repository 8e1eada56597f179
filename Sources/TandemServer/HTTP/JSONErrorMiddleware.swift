import Hummingbird
import HummingbirdWebSocket
import TandemCore

/// Gives what no route answers the JSON error shape instead of an empty body: an unknown path or
/// method is 404 or 405 with `not-found` or `unimplemented`, and `OPTIONS` says which methods a
/// path takes.
struct JSONErrorMiddleware: RouterMiddleware {
    typealias Context = CallerRequestContext
    /// Counts the errors it answers.
    var metrics: ServerMetrics?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        let allowed = Self.methods(for: path)
        if request.method == .options {
            guard let allowed else { return answer(Self.noRoute(path)) }
            return Response(status: .noContent, headers: [.allow: allowed.joined(separator: ", ")])
        }
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            guard let allowed, !allowed.contains(request.method.rawValue) else { return answer(Self.noRoute(path)) }
            let error = TandemError(.unimplemented, "\(path) does not take \(request.method.rawValue); it takes \(allowed.joined(separator: ", ")).")
            metrics?.answered(error)
            var response = HTTPAPI.json(.object(["error": error.wireValue]), status: .methodNotAllowed)
            response.headers[.allow] = allowed.joined(separator: ", ")
            return response
        }
    }

    private func answer(_ error: TandemError) -> Response {
        metrics?.answered(error)
        return HTTPAPI.errorResponse(error)
    }

    /// The methods a path takes, or nil when no route serves it.
    static func methods(for path: String) -> [String]? {
        switch path {
        case "/health", "/metrics", "/v1/changes": return ["GET", "HEAD", "OPTIONS"]
        case "/v1/query", "/v1/commit": return ["POST", "OPTIONS"]
        case "/v1/stream": return ["GET", "OPTIONS"]
        case "/v1/collections", "/v1/groups", "/v1/openapi.json": return ["GET", "HEAD", "OPTIONS"]
        default:
            if path == "/console" || path.hasPrefix("/console/") { return ["GET", "HEAD", "OPTIONS"] }
            if path.hasPrefix("/v1/documents/") { return ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] }
            return nil
        }
    }

    static func noRoute(_ path: String) -> TandemError {
        TandemError(.notFound, "No endpoint at \(path). The API is under /v1: documents/{path}, query, commit, changes, collections, groups, stream, openapi.json (this API described); and /health, /metrics; the web console is at /console.")
    }
}
