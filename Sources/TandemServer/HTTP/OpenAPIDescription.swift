import TandemCore

/// The HTTP API described in OpenAPI 3.1, built from the server's own values: every error code
/// and reason, every limit (with the value this server uses), and the status each code is
/// answered with. The server serves it at `/v1/openapi.json`; `docs/openapi.json` is the same
/// document for the default limits (`tandem openapi` writes it), and tests check both against the
/// routes the server registers.
public enum OpenAPIDescription {
    /// The description of a server with `limits`.
    public static func document(limits: ServerLimits = ServerLimits()) -> JSONValue {
        .object([
            "openapi": "3.1.0",
            "info": .object([
                "title": "Tandem HTTP API",
                "version": .string(TandemVersion.current),
                "description": .string("""
                    The HTTP half of a Tandem sync server: documents by path, one-off queries, atomic \
                    batches of writes, the change feed, and listings for consoles. The other half, \
                    the WebSocket stream at /v1/stream (listeners, pipelined writes with mutation \
                    ids), is described in docs/PROTOCOL.md. Bodies are JSON; integers and doubles are \
                    kept apart (1 is an integer, 1.0 a double). Every error answers \
                    {"error": {"code", "message"}} with the status x-tandem-errors gives its code; \
                    past a rate the status is 429 with Retry-After. On a server started with \
                    --auth-secret a request may carry a bearer token (HS256 JWT); the access rules \
                    decide what its user may read and write. x-tandem-limits lists every limit and \
                    its value on this server. A request a web page sends (it carries Origin) may \
                    write, or open the stream, only from the server's own origin or one the server \
                    allows (403 otherwise); a server bound to a loopback address answers only \
                    requests addressed to a loopback name or one it allows (421 otherwise).
                    """),
                "license": .object(["name": "Apache-2.0"]),
            ]),
            "servers": [["url": "/"]],
            "security": [[:], ["bearer": []]],
            "x-tandem-limits": limitValues(limits),
            "x-tandem-errors": .object(Dictionary(uniqueKeysWithValues: TandemError.Code.all.map { code in
                (code.rawValue, JSONValue.int(HTTPAPI.status(for: code).code))
            })),
            "paths": paths(limits),
            "components": components(limits),
        ])
    }

    /// Every field of `limits` by name, with its value.
    static func limitValues(_ limits: ServerLimits) -> JSONValue {
        var values: JSONObject = [:]
        for child in Mirror(reflecting: limits).children {
            guard let label = child.label, let value = child.value as? Int else { continue }
            values[label] = .int(value)
        }
        return .object(values)
    }

    // MARK: Paths

    static func paths(_ limits: ServerLimits) -> JSONValue {
        // A top-level document's path, as two segments: a path parameter holds no `/`, so a fuzzer
        // can make every value its schema allows. A document deeper down takes the same
        // operations at /v1/documents/collection/id/subcollection/id….
        let document: [JSONValue] = [["$ref": "#/components/parameters/collectionID"], ["$ref": "#/components/parameters/documentID"]]
        let write: [JSONValue] = document + [["$ref": "#/components/parameters/exists"], ["$ref": "#/components/parameters/version"]]
        return [
            "/health": [
                "get": operation("health", "Liveness, the server's version and how it is secured", security: false, ok: ref("Health"), errors: []),
            ],
            "/metrics": [
                "get": [
                    "operationId": "metrics",
                    "summary": "The server's counters, histograms and gauges in Prometheus' text format; on a secured server, for a token with \"admin\": true",
                    "responses": responses(ok: ["description": "The metrics", "content": ["text/plain": ["schema": ["type": "string"]]]], errors: [401, 403]),
                ],
            ],
            "/v1/openapi.json": [
                "get": operation("openAPI", "This description, with this server's limits", security: false, ok: ["type": "object"], errors: []),
            ],
            "/v1/stream": [
                "get": [
                    "operationId": "stream",
                    "summary": "The WebSocket stream (docs/PROTOCOL.md). A request that is not a WebSocket upgrade is answered 426",
                    "responses": [
                        "426": [
                            "description": "Not a WebSocket upgrade: connect with Upgrade: websocket",
                            "headers": ["Upgrade": ["schema": ["type": "string", "const": "websocket"]]],
                            "content": ["application/json": ["schema": ref("Error")]],
                        ],
                    ],
                ],
            ],
            "/v1/documents/{collection}/{id}": [
                "get": operation("getDocument", "Read a document", parameters: document, ok: ref("Document"), errors: [400, 401, 403, 404, 429]),
                "put": operation("setDocument", "Set a document's body (with merge=true, merge into it); transforms go in place ({\"$increment\": 1})",
                                 parameters: write + [["$ref": "#/components/parameters/merge"]], body: ref("Fields"),
                                 ok: ref("WriteAnswer"), errors: [400, 401, 403, 409, 412, 413, 415, 429, 503]),
                "patch": operation("updateDocument", "Update dotted field paths of an existing document: {\"address.city\": \"London\"}",
                                   parameters: write, body: ref("Fields"), ok: ref("WriteAnswer"), errors: [400, 401, 403, 404, 409, 412, 413, 415, 429, 503]),
                "delete": operation("deleteDocument", "Delete a document (deleting a missing one succeeds)", parameters: write,
                                    ok: ref("WriteAnswer"), errors: [400, 401, 403, 409, 412, 413, 429, 503]),
            ],
            "/v1/query": [
                "post": operation("query", "Run a query once", body: ref("Target"), ok: [
                    "type": "object", "required": ["documents", "version"],
                    "properties": ["documents": ["type": "array", "items": ref("Document")], "version": ref("Version")],
                ], errors: [400, 401, 403, 404, 413, 415, 429]),
            ],
            "/v1/commit": [
                "post": operation("commit", "Apply writes atomically: all of them at one new version, or none; a refused write is answered with its error",
                                  body: [
                                    "type": "object", "required": ["writes"],
                                    "properties": ["writes": ["type": "array", "items": ref("Mutation"), "maxItems": .int(limits.maximumBatchWrites)]],
                                  ], ok: [
                                    "type": "object", "required": ["results"],
                                    "properties": ["results": ["type": "array", "items": ref("WriteResult")], "version": ref("Version")],
                                  ], errors: [400, 401, 403, 404, 409, 412, 413, 415, 429, 503]),
            ],
            "/v1/changes": [
                "get": operation("changes", "A page of the change feed after a version, never splitting a commit; without collection, the whole database's (operators only on a secured server)",
                                 parameters: [
                                    query("since", "The version to read changes after (0: from the start; past the server's newest: 410)", int64(minimum: 0)),
                                    query("limit", "About how many changes a page holds (at most \(SyncService.maximumChangesPerPage))", int64(minimum: 1)),
                                    query("collection", "One collection's feed, read as its listener would be", collectionPattern),
                                    query("fromStart", "true: the page continues a read that began at since=0 (the caller holds only what its pages gave it), served however long ago deletions were pruned", ["type": "string", "enum": ["true", "false"]]),
                                 ], ok: [
                                    "type": "object", "required": ["changes", "version", "hasMore"],
                                    "properties": ["changes": ["type": "array", "items": ref("Change")], "version": ref("Version"), "hasMore": ["type": "boolean"]],
                                 ], errors: [400, 401, 403, 410, 429]),
            ],
            "/v1/collections": [
                "get": operation("listCollections", "The collections at the root, or directly under a document, that hold a document and that the caller may list whole",
                                 parameters: [query("parent", "A document path; the root when absent", documentPattern)],
                                 ok: ["type": "object", "required": ["collections"], "properties": ["collections": ["type": "array", "items": ["type": "string"]]]],
                                 errors: [400, 401, 429]),
            ],
            "/v1/groups": [
                "get": operation("listGroups", "The collection groups that hold a document and that the caller may list whole",
                                 ok: ["type": "object", "required": ["groups"], "properties": ["groups": ["type": "array", "items": ["type": "string"]]]],
                                 errors: [401, 429]),
            ],
        ]
    }

    /// The shapes of paths: a document's has an even number of segments, a collection's an odd
    /// number; no segment is empty or holds a `/`.
    static let documentPattern: JSONValue = ["type": "string", "pattern": "^[^/]+/[^/]+(/[^/]+/[^/]+)*$"]
    static let collectionPattern: JSONValue = ["type": "string", "pattern": "^[^/]+(/[^/]+/[^/]+)*$"]
    static let groupPattern: JSONValue = ["type": "string", "pattern": "^[^/]+$"]
    /// One segment of a path: no `/`, and neither `.` nor `..`.
    static let segmentPattern: JSONValue = ["type": "string", "pattern": "^([^/.][^/]*|\\.[^/.][^/]*|\\.\\.[^/]+)$"]

    /// An integer as the server reads one: 64 bits, signed (a larger one is not an integer to it).
    static func int64(minimum: Int) -> JSONValue {
        ["type": "integer", "minimum": .int(minimum), "maximum": .int(Int(Int64.max))]
    }

    /// An optional field, which may also be null (read as absent).
    static func nullable(_ schema: JSONValue) -> JSONValue { ["anyOf": [schema, ["type": "null"]]] }

    /// A mutation of one `op`, with its own fields beside the ones every mutation may have.
    static func mutation(_ op: String, required: [String], _ fields: JSONObject) -> JSONValue {
        var properties: JSONObject = [
            "op": ["const": .string(op)], "path": documentPattern,
            "precondition": nullable(ref("Precondition")), "id": nullable(ref("MutationID")),
        ]
        properties.merge(fields) { $1 }
        return ["type": "object", "required": .array((["op", "path"] + required).map { .string($0) }), "properties": .object(properties)]
    }

    static func ref(_ name: String) -> JSONValue { ["$ref": .string("#/components/schemas/\(name)")] }

    static func query(_ name: String, _ description: String, _ schema: JSONValue) -> JSONValue {
        ["name": .string(name), "in": "query", "required": false, "description": .string(description), "schema": schema]
    }

    static func operation(_ id: String, _ summary: String, security: Bool = true, parameters: [JSONValue] = [], body: JSONValue? = nil,
                          ok: JSONValue, errors: [Int]) -> JSONValue {
        var object: JSONObject = [
            "operationId": .string(id),
            "summary": .string(summary),
            "responses": responses(ok: ["description": "Done", "content": ["application/json": ["schema": ok]]], errors: errors),
        ]
        if !parameters.isEmpty { object["parameters"] = .array(parameters) }
        if let body { object["requestBody"] = ["required": true, "content": ["application/json": ["schema": body]]] }
        if !security { object["security"] = [[:]] }
        return .object(object)
    }

    static func responses(ok: JSONValue, errors: [Int]) -> JSONValue {
        var object: JSONObject = ["200": ok]
        for status in errors { object[String(status)] = ["$ref": .string("#/components/responses/\(status)")] }
        return .object(object)
    }

    // MARK: Components

    /// What each error status means, and which codes it answers.
    static let statuses: [(Int, String)] = [
        (400, "The request is wrong (malformed JSON, path, query or value): fix it"),
        (401, "No valid token (unauthenticated; reason token-expired when it expired)"),
        (403, "The rules do not allow it (permission-denied)"),
        (404, "No such document, or an update of a missing one (not-found)"),
        (409, "The document already exists, or an earlier write was not applied (already-exists, aborted)"),
        (410, "A change feed from before what is kept (since=0 is always served), or beyond the server's version (out-of-range): read again from 0"),
        (412, "A precondition did not hold (failed-precondition): read, then decide"),
        (413, "Over a size limit (resource-exhausted): make it smaller"),
        (415, "The body is not declared JSON (invalid-argument): send it with Content-Type: application/json"),
        (429, "Over a rate (resource-exhausted with retryAfter): wait Retry-After seconds, then send it again"),
        (503, "The database could not commit (unavailable): nothing was applied; send it again"),
    ]

    static func components(_ limits: ServerLimits) -> JSONValue {
        var errorResponses: JSONObject = [:]
        for (status, description) in statuses {
            var response: JSONObject = ["description": .string(description), "content": ["application/json": ["schema": ref("Error")]]]
            if status == 429 { response["headers"] = ["Retry-After": ["description": "Whole seconds to wait", "schema": ["type": "integer", "minimum": 1]]] }
            errorResponses[String(status)] = .object(response)
        }
        let value: JSONValue = ["description": "Any JSON value; integers and doubles are kept apart"]
        let fieldFilter: JSONValue = ["type": "object", "required": ["where", "op", "value"], "properties": [
            "where": ["type": "string"],
            "op": ["type": "string", "enum": .array(Query.FilterOperator.allCases.map { .string($0.rawValue) })],
            "value": value,
        ]]
        return [
            "securitySchemes": ["bearer": ["type": "http", "scheme": "bearer", "bearerFormat": "JWT"]],
            "parameters": [
                "collectionID": [
                    "name": "collection", "in": "path", "required": true,
                    "description": .string("The collection's id: the first segment of a document path, collection/id[/subcollection/id…] (an even number of segments, at most \(limits.maximumPathDepth); a deeper document's path goes on after the id). A segment's `/` may be written %2F"),
                    "schema": segmentPattern,
                ],
                "documentID": [
                    "name": "id", "in": "path", "required": true,
                    "description": "The document's id within the collection",
                    "schema": segmentPattern,
                ],
                "exists": query("exists", "Write only if the document exists (true) or does not (false)", ["type": "string", "enum": ["true", "false"]]),
                "version": query("version", "Write only if the document is at this version (0: does not exist)", int64(minimum: 0)),
                "merge": query("merge", "Merge the body into the document instead of replacing it", ["type": "string", "enum": ["true", "false"]]),
            ],
            "responses": .object(errorResponses),
            "schemas": [
                "Version": ["type": "integer", "minimum": 0, "maximum": .int(Int(Int64.max)), "description": "A commit's version: everything up to it"],
                "Value": value,
                "Fields": [
                    "type": "object", "additionalProperties": value,
                    "description": .string("A body (set) or dotted field paths (update); a document is at most \(limits.maximumDocumentBytes) bytes as compact JSON"),
                ],
                "Document": [
                    "type": "object", "required": ["path", "version", "createTime", "updateTime", "data"],
                    "properties": [
                        "path": ["type": "string"], "version": ref("Version"),
                        "createTime": ["type": "string", "format": "date-time"], "updateTime": ["type": "string", "format": "date-time"],
                        "data": ["type": "object"],
                    ],
                ],
                "WriteAnswer": [
                    "description": "The document after the write; or, when the write left none the caller may read, its path and version",
                    "anyOf": [
                        ref("Document"),
                        ["type": "object", "required": ["path", "version", "deleted"],
                         "properties": ["path": ["type": "string"], "version": ref("Version"), "deleted": ["const": true]]],
                        ["type": "object", "required": ["path", "version", "concealed"],
                         "properties": ["path": ["type": "string"], "version": ref("Version"), "concealed": ["const": true]]],
                    ],
                ],
                "MutationID": [
                    "type": "object", "required": ["client", "sequence"],
                    "properties": ["client": ["type": "string", "minLength": 1], "sequence": int64(minimum: 0)],
                ],
                "Precondition": [
                    "oneOf": [
                        ["type": "object", "required": ["exists"], "properties": ["exists": ["type": "boolean"]]],
                        ["type": "object", "required": ["version"], "properties": ["version": ref("Version")]],
                    ],
                ],
                // One shape per op; a field another op takes is not read (nor checked). An optional
                // field may be null, which reads as absent.
                "Mutation": [
                    "oneOf": [
                        mutation("set", required: ["data"], [
                            "data": ref("Fields"),
                            "merge": nullable(["type": "boolean"]),
                            "mergeFields": nullable(["type": "array", "items": ["type": "string"], "description": "Only with merge: true"]),
                        ]),
                        mutation("update", required: ["fields"], ["fields": ref("Fields")]),
                        mutation("delete", required: [], [:]),
                    ],
                ],
                "WriteResult": [
                    "type": "object", "required": ["status", "version", "document"],
                    "properties": [
                        "status": ["type": "string", "enum": ["applied", "replayed", "refused", "unknown"]],
                        "version": ref("Version"),
                        "document": ["anyOf": [ref("Document"), ["type": "null"]]],
                        "mutationId": ref("MutationID"),
                        "error": ref("ErrorBody"),
                        "concealed": ["const": true],
                    ],
                ],
                "Change": [
                    "type": "object", "required": ["path", "version", "document"],
                    "properties": [
                        "path": ["type": "string"], "version": ref("Version"),
                        "document": ["anyOf": [ref("Document"), ["type": "null"]]], "mutationId": ref("MutationID"),
                    ],
                ],
                "QueryOperation": [
                    "oneOf": [
                        fieldFilter,
                        ["type": "object", "required": ["or"], "properties": ["or": ["type": "array", "minItems": 1, "items": ref("QueryFilter")]],
                         "description": "Documents that pass any of the filters"],
                        ["type": "object", "required": ["and"], "properties": ["and": ["type": "array", "minItems": 1, "items": ref("QueryFilter")]],
                         "description": "Documents that pass every one of the filters"],
                        ["type": "object", "required": ["orderBy"], "properties": ["orderBy": ["type": "string"], "descending": nullable(["type": "boolean"])]],
                        ["type": "object", "required": ["limit"], "properties": ["limit": int64(minimum: 0)]],
                        ["type": "object", "required": ["limitToLast"], "properties": ["limitToLast": int64(minimum: 0)]],
                        ["type": "object", "required": ["startAt"], "properties": ["startAt": ["type": "array"]]],
                        ["type": "object", "required": ["startAfter"], "properties": ["startAfter": ["type": "array"]]],
                        ["type": "object", "required": ["endAt"], "properties": ["endAt": ["type": "array"]]],
                        ["type": "object", "required": ["endBefore"], "properties": ["endBefore": ["type": "array"]]],
                    ],
                ],
                // A filter inside an or or an and. Nested ors and ands are described as objects
                // with an array, not by referring to this schema again: a schema-driven fuzzer
                // need not follow a recursive reference, and the server checks each level.
                "QueryFilter": [
                    "oneOf": [
                        fieldFilter,
                        ["type": "object", "required": ["or"], "properties": ["or": ["type": "array", "minItems": 1, "items": ["type": "object"]]]],
                        ["type": "object", "required": ["and"], "properties": ["and": ["type": "array", "minItems": 1, "items": ["type": "object"]]]],
                    ],
                    "description": .string("A where filter, or an or or an and of filters; the query's filters make at most \(CompiledQuery.maximumDisjunctions) disjunctions once multiplied out"),
                ],
                "Target": [
                    "oneOf": [
                        ["type": "object", "required": ["document"], "properties": ["document": documentPattern]],
                        ["type": "object", "required": ["collection"], "properties": [
                            "collection": collectionPattern, "query": nullable(["type": "array", "items": ref("QueryOperation")]),
                        ]],
                        ["type": "object", "required": ["group"], "properties": [
                            "group": groupPattern, "query": nullable(["type": "array", "items": ref("QueryOperation")]),
                        ]],
                    ],
                ],
                "Health": [
                    "type": "object", "required": ["status", "version", "protocol", "access"],
                    "properties": [
                        "status": ["const": "ok"], "version": ["type": "string"], "protocol": ["type": "integer"],
                        "access": ["type": "string", "enum": ["open", "rules", "token"]],
                    ],
                ],
                "ErrorBody": [
                    "type": "object", "required": ["code", "message"],
                    "properties": [
                        "code": ["type": "string", "enum": .array(TandemError.Code.all.map { .string($0.rawValue) })],
                        "message": ["type": "string"],
                        "reason": ["type": "string", "enum": .array(TandemError.allReasons.map { .string($0) })],
                        "retryAfter": ["type": "integer", "minimum": 0, "description": "Milliseconds to wait before sending it again"],
                    ],
                ],
                "Error": ["type": "object", "required": ["error"], "properties": ["error": ref("ErrorBody")]],
            ],
        ]
    }

    // MARK: Text

    /// The description as JSON text, two spaces an indent and keys sorted, as `docs/openapi.json`
    /// holds it.
    public static func text(limits: ServerLimits = ServerLimits()) -> String {
        var output = ""
        write(document(limits: limits), indent: "", to: &output)
        return output + "\n"
    }

    static func write(_ value: JSONValue, indent: String, to output: inout String) {
        let inner = indent + "  "
        switch value {
        case .array(let items) where !items.isEmpty:
            output += "[\n"
            for (index, item) in items.enumerated() {
                output += inner
                write(item, indent: inner, to: &output)
                output += index == items.count - 1 ? "\n" : ",\n"
            }
            output += indent + "]"
        case .object(let object) where !object.isEmpty:
            output += "{\n"
            let keys = object.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            for (index, key) in keys.enumerated() {
                output += inner + JSONText.encode(.string(key)) + ": "
                write(object[key]!, indent: inner, to: &output)
                output += index == keys.count - 1 ? "\n" : ",\n"
            }
            output += indent + "}"
        default:
            output += JSONText.encode(value)
        }
    }
}
