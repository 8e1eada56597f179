/// A message from a client to the server over the `/v1/stream` WebSocket, one JSON text frame each:
/// `{"type": "hello" | "listen" | "unlisten" | "write" | "get" | "query" | "fetch" | "heartbeat", …}`.
///
/// Requests carry an `id` chosen by the client; the server's answer (or error) carries the same id.
/// A listener is named by the id of its `listen` request.
package enum ClientMessage: Sendable, Hashable {
    /// The first message: who the client is, the protocol it speaks, and its bearer token if any.
    case hello(clientID: String, protocolVersion: Int, token: String?)
    /// Starts a listener; with `resumeFrom`, only what changed after that version is sent. With
    /// `notify` (`"notify": true`), its batches carry no changes, only the version of the commits
    /// in its scope: for a client that reads what changed itself (a change feed's `fetch`).
    case listen(id: Int, target: ListenTarget, resumeFrom: Version?, notify: Bool = false)
    /// Stops the listener started by the `listen` with this id.
    case unlisten(id: Int)
    /// Commits mutations atomically, each at most once by its `MutationID`. `brief`
    /// (`"brief": true`): the answer names each applied write's version without its document
    /// (refusals still carry theirs), for a client that has what it wrote.
    case write(id: Int, mutations: [Mutation], brief: Bool = false)
    /// Commits mutations one by one, in order, each on its own (`"atomic": false`, protocol 3): one
    /// refused leaves the others to apply, and the answer lists each one's fate. A failure that may
    /// pass (`unavailable`) answers the whole request with an error: the client sends it again and
    /// the writes applied meanwhile are answered `replayed`.
    case writeEach(id: Int, mutations: [Mutation], brief: Bool = false)
    /// Reads one document.
    case get(id: Int, path: DocumentPath)
    /// Runs a query once.
    case query(id: Int, target: ListenTarget)
    /// Reads one page of a target's change feed: what changed after `since`, at most about
    /// `limit` changes (a commit is never cut), answered with a `page`. `fromStart`: the page
    /// continues a read that began at version 0, so the client holds only what its pages gave it,
    /// and it is served however long ago deletions were pruned.
    case fetch(id: Int, target: ListenTarget, since: Version, limit: Int, fromStart: Bool = false)
    /// Keeps the connection alive; the server answers with a heartbeat.
    case heartbeat

    /// The request id, when the message is a request.
    package var requestID: Int? {
        switch self {
        case .hello, .heartbeat: return nil
        case .listen(let id, _, _, _), .unlisten(let id), .write(let id, _, _), .writeEach(let id, _, _), .get(let id, _), .query(let id, _), .fetch(let id, _, _, _, _): return id
        }
    }

    package var wireValue: JSONValue {
        switch self {
        case .hello(let clientID, let protocolVersion, let token):
            var object: JSONObject = ["type": "hello", "clientId": .string(clientID), "protocol": .int(protocolVersion)]
            if let token { object["token"] = .string(token) }
            return .object(object)
        case .listen(let id, let target, let resumeFrom, let notify):
            var object: JSONObject = ["type": "listen", "id": .int(id), "target": target.wireValue]
            if let resumeFrom { object["resumeFrom"] = .int(Int(clamping: resumeFrom.rawValue)) }
            if notify { object["notify"] = true }
            return .object(object)
        case .unlisten(let id):
            return .object(["type": "unlisten", "id": .int(id)])
        case .write(let id, let mutations, let brief):
            var object: JSONObject = ["type": "write", "id": .int(id), "mutations": .array(mutations.map(\.wireValue))]
            if brief { object["brief"] = true }
            return .object(object)
        case .writeEach(let id, let mutations, let brief):
            var object: JSONObject = ["type": "write", "id": .int(id), "atomic": false, "mutations": .array(mutations.map(\.wireValue))]
            if brief { object["brief"] = true }
            return .object(object)
        case .get(let id, let path):
            return .object(["type": "get", "id": .int(id), "path": .string(path.description)])
        case .query(let id, let target):
            return .object(["type": "query", "id": .int(id), "target": target.wireValue])
        case .fetch(let id, let target, let since, let limit, let fromStart):
            var object: JSONObject = ["type": "fetch", "id": .int(id), "target": target.wireValue, "since": .int(Int(clamping: since.rawValue)), "limit": .int(limit)]
            if fromStart { object["fromStart"] = true }
            return .object(object)
        case .heartbeat:
            return ["type": "heartbeat"]
        }
    }

    /// The message as JSON text. Writes, nearly all of a client's bytes, are written straight to
    /// text (the same text as `JSONText.encode(wireValue)`).
    package var text: String {
        switch self {
        case .write(let id, let mutations, let brief), .writeEach(let id, let mutations, let brief):
            var writer = WireWriter(capacity: 64 + mutations.count * 128)
            if case .writeEach = self { writer.raw(#"{"atomic":false,"#) } else { writer.raw("{") }
            if brief { writer.raw(#""brief":true,"#) }
            writer.raw(#""id":"#)
            writer.int(id)
            writer.raw(#","mutations":["#)
            for (index, mutation) in mutations.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.mutation(mutation)
            }
            writer.raw(#"],"type":"write"}"#)
            return writer.text
        default:
            return JSONText.encode(wireValue)
        }
    }

    /// Reads a message. A malformed or unknown one throws `invalid-argument`; `requestID(in:)` still
    /// finds the id to answer it by, when there is one.
    package init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "the message")
        let type = try object.string("type")
        switch type {
        case "hello":
            let clientID = try object.string("clientId")
            guard !clientID.isEmpty, clientID.utf8.count <= 256 else {
                throw TandemError.invalidArgument("The hello's clientId must be 1 to 256 bytes; keep one random id per installation.")
            }
            self = .hello(clientID: clientID, protocolVersion: try object.int("protocol"), token: try object.optionalString("token"))
        case "listen":
            self = .listen(id: try object.int("id"), target: try ListenTarget(wire: try object.value("target")), resumeFrom: try object.optionalVersion("resumeFrom"),
                           notify: try object.bool("notify", default: false))
        case "unlisten":
            self = .unlisten(id: try object.int("id"))
        case "write":
            var mutations: [Mutation] = []
            for (index, entry) in try object.array("mutations").enumerated() {
                mutations.append(try Mutation(wire: entry, context: "mutation \(index + 1) of the write"))
            }
            let id = try object.int("id")
            let brief = try object.bool("brief", default: false)
            self = try object.bool("atomic", default: true) ? .write(id: id, mutations: mutations, brief: brief) : .writeEach(id: id, mutations: mutations, brief: brief)
        case "get":
            self = .get(id: try object.int("id"), path: try object.documentPath("path"))
        case "query":
            self = .query(id: try object.int("id"), target: try ListenTarget(wire: try object.value("target")))
        case "fetch":
            let since = try object.version("since")
            let limit = try object.optionalInt("limit") ?? 1_000
            guard limit > 0 else {
                throw TandemError.invalidArgument("A fetch's limit is more than 0 (it is \(limit)).")
            }
            self = .fetch(id: try object.int("id"), target: try ListenTarget(wire: try object.value("target")), since: since, limit: limit,
                          fromStart: try object.optionalBool("fromStart") ?? false)
        case "heartbeat":
            self = .heartbeat
        default:
            throw TandemError.invalidArgument("Unknown message type '\(type)'; this server speaks protocol \(TandemVersion.wireProtocol): hello, listen, unlisten, write, get, query, fetch, heartbeat.")
        }
    }

    /// The `id` of a message that may not parse as a whole, so an error can answer it.
    package static func requestID(in value: JSONValue) -> Int? {
        guard case .object(let object) = value, case .int(let id)? = object["id"] else { return nil }
        return id
    }

    /// The `id` of a message read from its first bytes alone, without parsing the rest: for a
    /// message refused before it is parsed (over the size limit, or the connection's rate), so the
    /// refusal can answer it. Looks at most `limit` bytes, and only at the top level of the object.
    package static func requestID(prefix bytes: some Collection<UInt8>, limit: Int = 512) -> Int? {
        var depth = 0
        var inString = false
        var escaped = false
        var key: [UInt8] = []
        var lastKey: [UInt8]?
        var afterColon = false
        var digits: [UInt8] = []
        var negative = false
        for byte in bytes.prefix(limit) {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 1 && !afterColon { lastKey = key }
                } else if depth == 1 && !afterColon {
                    key.append(byte)
                }
                continue
            }
            if afterColon && depth == 1 && lastKey == Array("id".utf8) {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"):
                    digits.append(byte)
                    continue
                case UInt8(ascii: "-") where digits.isEmpty:
                    negative = true
                    continue
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                    if digits.isEmpty { continue }
                default:
                    break
                }
                guard !digits.isEmpty, let value = Int(String(decoding: digits, as: UTF8.self)) else { return nil }
                return negative ? -value : value
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
                key = []
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth <= 0 { return nil }
            case UInt8(ascii: ":") where depth == 1:
                afterColon = true
            case UInt8(ascii: ",") where depth == 1:
                afterColon = false
                lastKey = nil
            default:
                break
            }
        }
        return nil
    }
}
