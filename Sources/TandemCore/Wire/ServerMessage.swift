/// A message from the server to a client over `/v1/stream`, one JSON text frame each:
/// `{"type": "welcome" | "ack" | "snapshot" | "changes" | "documents" | "page" | "error" | "heartbeat", …}`.
package enum ServerMessage: Sendable, Hashable {
    /// The answer to `hello`: the protocol and server version, and how often the client should send
    /// heartbeats (the server closes a connection silent for three intervals), and the user the
    /// hello's token signed in (`user`, absent for an anonymous connection).
    case welcome(protocolVersion: Int, serverVersion: String, heartbeatSeconds: Int, user: String? = nil)
    /// The answer to `write`: one acknowledgement per mutation, in order.
    case ack(id: Int, acknowledgements: [WriteAcknowledgement])
    /// Part of a listener's batch. A batch may span several messages; every one but the last says
    /// `more`, and a client applies the batch only once it has the last (never half of a batch).
    /// `reset` says the listener's resume version was too old: this is a full snapshot.
    case batch(target: Int, batch: RemoteChangeBatch, reset: Bool, more: Bool)
    /// One commit's changes for several listeners of the connection at once (each gets the same
    /// changes): `{"type": "changes", "targets": [ids], …}`. Never part of a larger batch.
    case sharedBatch(targets: [Int], batch: RemoteChangeBatch)
    /// The answer to `get` and `query`: the documents, and the version they were read at.
    case documents(id: Int, documents: [Document], version: Version)
    /// The answer to `fetch`: one page of the change feed.
    case page(id: Int, ChangePage)
    /// A request failed, or (without an id) the connection is in trouble. For a listener, `id` is
    /// the listen id and the listener is gone.
    case error(id: Int?, TandemError)
    /// The answer to a heartbeat.
    case heartbeat

    package var wireValue: JSONValue {
        switch self {
        case .welcome(let protocolVersion, let serverVersion, let heartbeatSeconds, let user):
            var object: JSONObject = ["type": "welcome", "protocol": .int(protocolVersion), "server": .string(serverVersion), "heartbeatSeconds": .int(heartbeatSeconds)]
            if let user { object["user"] = .string(user) }
            return .object(object)
        case .ack(let id, let acknowledgements):
            return .object(["type": "ack", "id": .int(id), "results": .array(acknowledgements.map(\.wireValue))])
        case .batch(let target, let batch, let reset, let more):
            var object: JSONObject = [
                "type": .string(batch.isSnapshot ? "snapshot" : "changes"),
                "target": .int(target),
                "version": .int(Int(clamping: batch.version.rawValue)),
                "changes": .array(batch.changes.map(\.wireValue)),
            ]
            if reset { object["reset"] = true }
            if more { object["more"] = true }
            return .object(object)
        case .sharedBatch(let targets, let batch):
            return .object([
                "type": "changes",
                "targets": .array(targets.map { .int($0) }),
                "version": .int(Int(clamping: batch.version.rawValue)),
                "changes": .array(batch.changes.map(\.wireValue)),
            ])
        case .documents(let id, let documents, let version):
            return .object(["type": "documents", "id": .int(id), "documents": .array(documents.map(\.wireValue)), "version": .int(Int(clamping: version.rawValue))])
        case .page(let id, let page):
            return .object(["type": "page", "id": .int(id), "changes": .array(page.changes.map(\.wireValue)),
                            "version": .int(Int(clamping: page.version.rawValue)), "hasMore": .bool(page.hasMore)])
        case .error(let id, let error):
            var object: JSONObject = ["type": "error", "code": .string(error.code.rawValue), "message": .string(error.message)]
            if let reason = error.reason { object["reason"] = .string(reason) }
            if let retryAfter = error.retryAfter { object["retryAfter"] = .int(retryAfter.wholeMilliseconds) }
            if let id { object["id"] = .int(id) }
            return .object(object)
        case .heartbeat:
            return ["type": "heartbeat"]
        }
    }

    package init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "the server's message")
        let type = try object.string("type")
        switch type {
        case "welcome":
            self = .welcome(protocolVersion: try object.int("protocol"), serverVersion: try object.string("server"), heartbeatSeconds: try object.int("heartbeatSeconds"),
                            user: try object.optionalString("user"))
        case "ack":
            var acknowledgements: [WriteAcknowledgement] = []
            for entry in try object.array("results") { acknowledgements.append(try WriteAcknowledgement(wire: entry)) }
            self = .ack(id: try object.int("id"), acknowledgements: acknowledgements)
        case "snapshot", "changes":
            var changes: [RemoteChange] = []
            for entry in try object.array("changes") { changes.append(try RemoteChange(wire: entry)) }
            let batch = RemoteChangeBatch(isSnapshot: type == "snapshot", changes: changes, version: try object.version("version"))
            if type == "changes" && object.has("targets") {
                var targets: [Int] = []
                for entry in try object.array("targets") {
                    guard case .int(let target) = entry else { throw object.wrongType("targets", "an array of listener ids", entry) }
                    targets.append(target)
                }
                self = .sharedBatch(targets: targets, batch: batch)
                return
            }
            self = .batch(target: try object.int("target"), batch: batch, reset: try object.bool("reset", default: false), more: try object.bool("more", default: false))
        case "documents":
            var documents: [Document] = []
            for entry in try object.array("documents") { documents.append(try Document(wire: entry)) }
            self = .documents(id: try object.int("id"), documents: documents, version: try object.version("version"))
        case "page":
            var changes: [RemoteChange] = []
            for entry in try object.array("changes") { changes.append(try RemoteChange(wire: entry)) }
            self = .page(id: try object.int("id"), ChangePage(changes: changes, version: try object.version("version"), hasMore: try object.bool("hasMore", default: false)))
        case "error":
            self = .error(id: try object.optionalInt("id"), try TandemError(wire: value))
        case "heartbeat":
            self = .heartbeat
        default:
            throw TandemError.invalidArgument("Unknown server message type '\(type)'; the server may speak a newer protocol than this client (\(TandemVersion.wireProtocol)).")
        }
    }
}

extension RemoteChange {
    /// `{"path", "version", "document": {…} | null, "mutationId"?}`.
    package var wireValue: JSONValue {
        var object: JSONObject = [
            "path": .string(path.description),
            "version": .int(Int(clamping: version.rawValue)),
            "document": document?.wireValue ?? .null,
        ]
        if let mutationID { object["mutationId"] = mutationID.wireValue }
        return .object(object)
    }

    package init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "a change")
        self.init(
            path: try object.documentPath("path"),
            document: object.has("document") ? try Document(wire: try object.value("document")) : nil,
            version: try object.version("version"),
            mutationID: object.has("mutationId") ? try MutationID(wire: try object.value("mutationId")) : nil
        )
    }
}

extension WriteAcknowledgement {
    /// `{"concealed"?: true, "document": {…} | null, "error"?: {"code", "message"}, "mutationId"?, "status", "version"}`;
    /// a write made without an id carries none. A reader of protocol 1 (no `status`) takes `applied`.
    package var wireValue: JSONValue {
        var object: JSONObject = [
            "version": .int(Int(clamping: version.rawValue)),
            "document": document?.wireValue ?? .null,
            "status": .string(status.rawValue),
        ]
        if let id { object["mutationId"] = id.wireValue }
        if let error { object["error"] = error.wireValue }
        if isConcealed { object["concealed"] = true }
        return .object(object)
    }

    package init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "an acknowledgement")
        let status: WriteStatus
        if let text = try object.optionalString("status") {
            guard let known = WriteStatus(rawValue: text) else {
                throw TandemError.invalidArgument("Unknown acknowledgement status '\(text)'; expected applied, replayed, refused or unknown.")
            }
            status = known
        } else {
            status = .applied
        }
        self.init(
            id: object.has("mutationId") ? try MutationID(wire: try object.value("mutationId")) : nil,
            status: status,
            version: try object.version("version"),
            document: object.has("document") ? try Document(wire: try object.value("document")) : nil,
            error: object.has("error") ? try TandemError(wire: try object.value("error")) : nil
        )
        isConcealed = try object.optionalBool("concealed") ?? false
    }
}

extension TandemError {
    /// `{"code", "message", "reason"?, "retryAfter"?}` (milliseconds), as an acknowledgement or an
    /// HTTP answer carries a refusal.
    package var wireValue: JSONValue {
        var object: JSONObject = ["code": .string(code.rawValue), "message": .string(message)]
        if let reason { object["reason"] = .string(reason) }
        if let retryAfter { object["retryAfter"] = .int(retryAfter.wholeMilliseconds) }
        return .object(object)
    }

    package init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "an error")
        let retryAfter = try object.optionalInt("retryAfter").map { Duration.milliseconds(min(max(0, $0), 86_400_000)) }
        self.init(Code(rawValue: try object.string("code")), try object.string("message"), reason: try object.optionalString("reason"), retryAfter: retryAfter)
    }
}
