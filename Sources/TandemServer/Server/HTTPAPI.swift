import Foundation
import Hummingbird
import NIOCore
import HummingbirdWebSocket
import TandemCore

/// The HTTP endpoints: documents by path, one-off queries, batch commits, the change feed, health.
/// Bodies are JSON; transforms are written in place as `{"$increment": 1}` and the like.
struct HTTPAPI: Sendable {
    let service: SyncService
    var limits: ServerLimits { service.limits }

    /// Who sends `request`, from its bearer token and the address it came from. HTTP requests
    /// stand alone: no device binds their mutation ids.
    private func caller(_ request: Request, _ context: CallerRequestContext) throws(TandemError) -> Principal {
        Principal(identity: try service.authenticate(authorization: request.headers[.authorization]), address: context.remoteAddress?.ipAddress)
    }

    /// Who sends the read `request`, once its caller's HTTP read rate admits it (see
    /// ``Admission/admitRead(from:)``); past the rate the refusal is thrown, answered 429 with
    /// `Retry-After`, before anything is read.
    private func reader(_ request: Request, _ context: CallerRequestContext) throws(TandemError) -> Principal {
        let asker = try caller(request, context)
        if let refusal = service.admission.admitRead(from: asker) { throw refusal }
        return asker
    }

    func register(on router: Router<CallerRequestContext>) {
        router.get("/health") { _, _ in
            // `access`, for a console: "open" (no access control), "rules" (rules, every caller
            // anonymous) or "token" (rules, and bearer tokens say who calls).
            Self.json(.object(["status": "ok", "version": .string(TandemVersion.current), "protocol": .int(TandemVersion.wireProtocol),
                               "access": .string(service.access == nil ? "open" : (service.access?.tokens == nil ? "rules" : "token"))]))
        }
        router.get("/metrics") { request, context in
            // On a secured server, for operators only (a token with "admin": true).
            if let access = service.access {
                do {
                    try access.checkMetrics(by: try self.caller(request, context).identity)
                } catch {
                    let error = SyncService.tandemError(error)
                    service.metrics.answered(error)
                    return Self.errorResponse(error)
                }
            }
            let version = try await service.currentVersion()
            let text = service.metrics.scrape(listeners: service.hub.listenerCount, sessions: service.streamSessions.load(ordering: .relaxed), version: version,
                                              storeBytes: await service.store.storeSize())
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        // The description depends only on the limits: built once, when the routes are.
        let description = ByteBuffer(string: JSONText.encode(OpenAPIDescription.document(limits: limits)))
        router.get("/v1/openapi.json") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: description))
        }
        router.get("/v1/stream") { _, _ in
            var response = Self.json(.object(["error": .object([
                "code": .string(TandemError.Code.failedPrecondition.rawValue),
                "message": "/v1/stream is a WebSocket: connect with an Upgrade: websocket request (ws:// or wss://).",
            ])]), status: .upgradeRequired)
            response.headers[.upgrade] = "websocket"
            return response
        }
        router.get("/v1/documents/**") { request, context in
            try await handle {
                let asker = try self.reader(request, context)
                let path = try Self.documentPath(context)
                guard let document = try await service.get(path, context: asker).documents.first else {
                    throw TandemError(.notFound, "No document at \(path).")
                }
                return document.wireValue
            }
        }
        router.put("/v1/documents/**") { request, context in
            try await handle {
                let asker = try self.caller(request, context)
                let path = try Self.documentPath(context)
                let body = try await Self.body(request, limits: limits)
                let merge = try Self.flag(request.uri.queryParameters.get("merge"), name: "merge") ?? false
                let mutation = try Mutation(wire: .object(["op": "set", "path": .string(path.description), "data": body, "merge": .bool(merge)]), context: "the request body")
                return try await commitOne(mutation.requiring(Self.precondition(request)), as: asker)
            }
        }
        router.patch("/v1/documents/**") { request, context in
            try await handle {
                let asker = try self.caller(request, context)
                let path = try Self.documentPath(context)
                let body = try await Self.body(request, limits: limits)
                let mutation = try Mutation(wire: .object(["op": "update", "path": .string(path.description), "fields": body]), context: "the request body")
                return try await commitOne(mutation.requiring(Self.precondition(request)), as: asker)
            }
        }
        router.delete("/v1/documents/**") { request, context in
            try await handle {
                let asker = try self.caller(request, context)
                let path = try Self.documentPath(context)
                return try await commitOne(Mutation.delete(path).requiring(Self.precondition(request)), as: asker)
            }
        }
        router.get("/v1/collections") { request, context in
            try await handle {
                let asker = try self.reader(request, context)
                let parent = try request.uri.queryParameters.get("parent").map { text throws(TandemError) in
                    try DocumentPath(text)
                }
                return .object(["collections": .array(try await service.collectionIDs(under: parent, context: asker).map(JSONValue.string))])
            }
        }
        router.get("/v1/groups") { request, context in
            try await handle {
                let asker = try self.reader(request, context)
                return .object(["groups": .array(try await service.collectionGroups(context: asker).map(JSONValue.string))])
            }
        }
        router.post("/v1/query") { request, context in
            try await handle {
                let asker = try self.reader(request, context)
                let target = try ListenTarget(wire: try await Self.body(request, limits: limits))
                let snapshot = try await service.query(target, context: asker)
                return .object(["documents": .array(snapshot.documents.map(\.wireValue)), "version": .int(Int(clamping: snapshot.version.rawValue))])
            }
        }
        router.post("/v1/commit") { request, context in
            try await handle {
                let asker = try self.caller(request, context)
                let body = try WireObject(try await Self.body(request, limits: limits), context: "the commit body")
                var mutations: [Mutation] = []
                for (index, entry) in try body.array("writes").enumerated() {
                    mutations.append(try Mutation(wire: entry, context: "write \(index + 1)"))
                }
                let result = try await commit(mutations, as: asker)
                var object: JSONObject = ["results": .array(result.acknowledgements.map(\.wireValue))]
                if let batch = result.batch { object["version"] = .int(Int(clamping: batch.version.rawValue)) }
                return .object(object)
            }
        }
        router.get("/v1/changes") { request, context in
            try await handle {
                let asker = try self.reader(request, context)
                let parameters = request.uri.queryParameters
                let since = try Self.integer(parameters.get("since"), name: "since") ?? 0
                let limit = try Self.integer(parameters.get("limit"), name: "limit") ?? 1000
                guard since >= 0, limit > 0 else {
                    throw TandemError.invalidArgument("since must be 0 or more and limit more than 0.")
                }
                // One collection's feed (`collection=users/ada/notes`), or the whole database's.
                let target = try parameters.get("collection").map { ListenTarget.collection(try CollectionPath($0), Query()) }
                // The next page of a read that began at 0: served whatever was pruned.
                let fromStart = try Self.flag(parameters.get("fromStart"), name: "fromStart") ?? false
                let page = try await service.changes(since: Version(UInt64(since)), in: target, limit: min(limit, SyncService.maximumChangesPerPage),
                                                     fromStart: fromStart, context: asker)
                return .object([
                    "changes": .array(page.changes.map(\.wireValue)),
                    "version": .int(Int(clamping: page.version.rawValue)),
                    "hasMore": .bool(page.hasMore),
                ])
            }
        }
    }

    /// Commits one request; a refusal is thrown, to be answered with its status and error.
    private func commit(_ mutations: [Mutation], as context: Principal) async throws -> CommitResult {
        if let refusal = service.admission.admitWrites(max(1, mutations.count), from: context) {
            throw refusal
        }
        let result = try await service.commit([mutations], context: context)[0].get()
        if let refusal = result.refusal { throw refusal }
        return result
    }

    private func commitOne(_ mutation: Mutation, as context: Principal) async throws -> JSONValue {
        let result = try await commit([mutation], as: context)
        guard let acknowledgement = result.acknowledgements.first else {
            throw TandemError(.internal, "The commit returned no acknowledgement.")
        }
        if let document = acknowledgement.document { return document.wireValue }
        let version = JSONValue.int(Int(clamping: acknowledgement.version.rawValue))
        if acknowledgement.isConcealed {
            // Applied, but the caller may not read what it left: said so, never called a deletion.
            return .object(["path": .string(mutation.path.description), "version": version, "concealed": true])
        }
        return .object(["path": .string(mutation.path.description), "version": version, "deleted": true])
    }

    private func handle(_ body: () async throws -> JSONValue) async throws -> Response {
        do {
            return Self.json(try await body())
        } catch {
            let error = SyncService.tandemError(error)
            service.metrics.answered(error)
            return Self.errorResponse(error)
        }
    }

    // MARK: Parsing

    /// The document path after `/v1/documents/`. A `/` written `%2F` separates segments too (no
    /// segment may hold one), as URL builders that encode a whole path write it.
    static func documentPath(_ context: CallerRequestContext) throws -> DocumentPath {
        let segments = context.parameters.getCatchAll().flatMap { raw in
            PathRules.splitAtSlashes(String(raw).removingPercentEncoding ?? String(raw))
        }
        return try DocumentPath(segments: segments)
    }

    static func body(_ request: Request, limits: ServerLimits) async throws -> JSONValue {
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: limits.maximumRequestBytes)
        } catch is NIOTooManyBytesError {
            throw TandemError(.resourceExhausted, "The request body is over \(limits.maximumRequestBytes) bytes; send smaller batches.")
        }
        guard buffer.readableBytes > 0 else {
            throw TandemError.invalidArgument("The request needs a JSON body.")
        }
        return try JSONText.parse(bytes: buffer.readableBytesView, maximumDepth: limits.maximumJSONDepth)
    }

    static func precondition(_ request: Request) throws -> Mutation.Precondition? {
        let parameters = request.uri.queryParameters
        // Both are read, so a malformed one is refused even beside the other.
        let exists = try flag(parameters.get("exists"), name: "exists")
        let version = try integer(parameters.get("version"), name: "version")
        switch (exists, version) {
        case (_?, _?):
            throw TandemError.invalidArgument("A write takes one precondition: exists or version, not both.")
        case (let exists?, nil):
            return .exists(exists)
        case (nil, let version?):
            guard version >= 0 else { throw TandemError.invalidArgument("version must be 0 or more.") }
            return .version(Version(UInt64(version)))
        case (nil, nil):
            return nil
        }
    }

    /// A query parameter that is `true` or `false`; nil when absent.
    static func flag(_ text: String?, name: String) throws(TandemError) -> Bool? {
        guard let text else { return nil }
        guard text == "true" || text == "false" else { throw TandemError.invalidArgument("\(name) must be true or false, got '\(text)'.") }
        return text == "true"
    }

    static func integer(_ text: String?, name: String) throws -> Int? {
        guard let text else { return nil }
        guard let value = Int(text) else { throw TandemError.invalidArgument("\(name) must be an integer, got '\(text)'.") }
        return value
    }

    // MARK: Responses

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: JSONText.encode(value))))
    }

    static func errorResponse(_ error: TandemError) -> Response {
        // Over a rate: 429, with the wait in whole seconds too, as HTTP clients expect.
        var response = json(.object(["error": error.wireValue]), status: error.retryAfter == nil ? status(for: error.code) : .tooManyRequests)
        if let milliseconds = error.retryAfter?.wholeMilliseconds {
            response.headers[.retryAfter] = String(max(1, milliseconds / 1000 + (milliseconds % 1000 == 0 ? 0 : 1)))
        }
        return response
    }

    static func status(for code: TandemError.Code) -> HTTPResponse.Status {
        switch code {
        case .invalidArgument: return .badRequest
        case .unauthenticated: return .unauthorized
        case .permissionDenied: return .forbidden
        case .notFound: return .notFound
        case .alreadyExists, .aborted: return .conflict
        case .failedPrecondition: return .preconditionFailed
        case .outOfRange: return .gone
        case .resourceExhausted: return .contentTooLarge
        case .unimplemented: return .notImplemented
        case .unavailable: return .serviceUnavailable
        case .deadlineExceeded: return .requestTimeout
        default: return .internalServerError
        }
    }
}

extension Mutation {
    func requiring(_ precondition: Precondition?) -> Mutation {
        var copy = self
        if let precondition { copy.precondition = precondition }
        return copy
    }
}
