import Hummingbird

/// Lets pages on the origins a server allows (``SyncServerConfiguration/allowedOrigins``) use the
/// HTTP API from a browser: their requests are answered with `Access-Control-Allow-Origin`, and
/// the browser's preflight `OPTIONS` with the methods and headers the API takes. Pages on other
/// origins get none of this, so their browser hides every answer from them; what they may not
/// send at all, ``SitePolicy`` refuses before a route sees it.
struct AllowedOriginsMiddleware: RouterMiddleware {
    typealias Context = CallerRequestContext
    let sites: SitePolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[.origin], sites.allowsListed(origin: origin) else {
            return try await next(request, context)
        }
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil,
           let methods = JSONErrorMiddleware.methods(for: request.uri.path) {
            var response = Response(status: .noContent)
            allow(origin, in: &response)
            response.headers[.accessControlAllowMethods] = methods.joined(separator: ", ")
            response.headers[.accessControlAllowHeaders] = "Authorization, Content-Type"
            response.headers[.accessControlMaxAge] = "600"
            return response
        }
        var response = try await next(request, context)
        allow(origin, in: &response)
        // A page reads how long to wait past a rate.
        response.headers[.accessControlExposeHeaders] = "Retry-After"
        return response
    }

    private func allow(_ origin: String, in response: inout Response) {
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.vary] = "Origin"
    }
}
