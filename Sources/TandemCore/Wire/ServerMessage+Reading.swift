import Foundation

extension ServerMessage {
    /// Parses a message from its text. Change batches and pages, nearly all of a sync's bytes, are
    /// read straight into their changes, without a ``JSONValue`` object per change and per document;
    /// every other message, and a batch this reader does not expect, goes through
    /// ``init(wire:)``, which also words the error for a malformed one.
    package static func parse(_ text: String) throws(TandemError) -> ServerMessage {
        var text = text
        let fast: ServerMessage? = text.withUTF8 { bytes in
            // The server writes keys sorted: a batch's "changes" first, an acknowledgement's "id".
            if bytes.starts(with: #"{"changes":"#.utf8) {
                var parser = JSONParser(bytes: bytes)
                return try? readBatch(&parser)
            }
            if bytes.starts(with: #"{"id":"#.utf8) {
                var parser = JSONParser(bytes: bytes)
                return try? readAck(&parser)
            }
            return nil
        }
        if let fast { return fast }
        return try ServerMessage(wire: try JSONText.parse(text))
    }

    private static func readBatch(_ parser: inout JSONParser) throws(TandemError) -> ServerMessage? {
        var changes: [RemoteChange]?
        var type: String?
        var target: Int?
        var targets: [Int]?
        var version: Int?
        var more = false
        var reset = false
        var hasMore = false
        var id: Int?
        try parser.readObject { (parser, key) throws(TandemError) in
            switch key {
            case "changes":
                var read: [RemoteChange] = []
                try parser.readArray { (parser) throws(TandemError) in read.append(try readChange(&parser)) }
                changes = read
            case "type": type = try parser.readString()
            case "target": target = try parser.readInt()
            case "version": version = try parser.readInt()
            case "more", "reset", "hasMore":
                guard case .bool(let flag) = try parser.parseValue() else { throw parser.fail("expected a bool") }
                switch key {
                case "more": more = flag
                case "reset": reset = flag
                default: hasMore = flag
                }
            case "id": id = try parser.readInt()
            case "targets":
                var read: [Int] = []
                try parser.readArray { (parser) throws(TandemError) in read.append(try parser.readInt()) }
                targets = read
            default: _ = try parser.parseValue()
            }
        }
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count, let changes, let type, let version, version >= 0 else { return nil }
        if type == "page", let id {
            return .page(id: id, ChangePage(changes: changes, version: Version(UInt64(version)), hasMore: hasMore))
        }
        guard type == "snapshot" || type == "changes" else { return nil }
        let batch = RemoteChangeBatch(isSnapshot: type == "snapshot", changes: changes, version: Version(UInt64(version)))
        if type == "changes", let targets { return .sharedBatch(targets: targets, batch: batch) }
        guard let target else { return nil }
        return .batch(target: target, batch: batch, reset: reset, more: more)
    }

    /// `{"id", "results": [{"document": {…} | null, "error"?, "mutationId"?, "status", "version"}], "type": "ack"}`; nil
    /// for any other message starting with an id.
    private static func readAck(_ parser: inout JSONParser) throws(TandemError) -> ServerMessage? {
        var id: Int?
        var type: String?
        var acknowledgements: [WriteAcknowledgement]?
        try parser.readObject { (parser, key) throws(TandemError) in
            switch key {
            case "id": id = try parser.readInt()
            case "type": type = try parser.readString()
            case "results":
                var read: [WriteAcknowledgement] = []
                try parser.readArray { (parser) throws(TandemError) in read.append(try readAcknowledgement(&parser)) }
                acknowledgements = read
            default: _ = try parser.parseValue()
            }
        }
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count, type == "ack", let id, let acknowledgements else { return nil }
        return .ack(id: id, acknowledgements: acknowledgements)
    }

    private static func readAcknowledgement(_ parser: inout JSONParser) throws(TandemError) -> WriteAcknowledgement {
        var fields = CommitFields()
        // A server of protocol 1 sends no status: its acknowledgements are applications.
        var status = WriteStatus.applied
        var error: TandemError?
        var concealed = false
        try parser.readObject { (parser, key) throws(TandemError) in
            switch key {
            case "concealed":
                concealed = try parser.readBool()
            case "status":
                let text = try parser.readString()
                guard let known = WriteStatus(rawValue: text) else { throw parser.fail("unknown acknowledgement status '\(text)'") }
                status = known
            case "error":
                error = try TandemError(wire: try parser.parseValue())
            default:
                if try !fields.read(key, &parser) { _ = try parser.parseValue() }
            }
        }
        guard let version = fields.version, version >= 0 else { throw parser.fail("an acknowledgement needs a version") }
        var acknowledgement = WriteAcknowledgement(id: fields.mutationID, status: status, version: Version(UInt64(version)), document: fields.document, encodedData: fields.encodedData)
        acknowledgement.error = error
        acknowledgement.isConcealed = concealed
        return acknowledgement
    }

    /// The fields a change and an acknowledgement share: the document, with the text of its data
    /// as it came, the version and the mutation id.
    private struct CommitFields {
        var document: Document?
        var encodedData: String?
        var version: Int?
        var mutationID: MutationID?

        /// Reads the value of `key` if it is one of these; false, reading nothing, if not.
        mutating func read(_ key: String, _ parser: inout JSONParser) throws(TandemError) -> Bool {
            switch key {
            case "document": document = try parser.readNull() ? nil : try readDocument(&parser, encodedData: &encodedData)
            case "version": version = try parser.readInt()
            case "mutationId": mutationID = try parser.readNull() ? nil : try MutationID(wire: try parser.parseValue())
            default: return false
            }
            return true
        }
    }

    /// `{"document": {…} | null, "mutationId"?, "path", "version"}`.
    private static func readChange(_ parser: inout JSONParser) throws(TandemError) -> RemoteChange {
        var fields = CommitFields()
        var pathText: String?
        var documentsPath = false
        try parser.readObject { (parser, key) throws(TandemError) in
            if key == "path" {
                // Usually the document's own path, read just before: compared in place, not copied.
                let start = parser.index
                if let path = fields.document?.path.description,
                   (try? parser.readPlainString { path.utf8.elementsEqual($0) }) == true {
                    documentsPath = true
                } else {
                    parser.index = start
                    pathText = try parser.readString()
                }
            } else if try !fields.read(key, &parser) {
                _ = try parser.parseValue()
            }
        }
        let document = fields.document
        guard documentsPath || pathText != nil, let version = fields.version, version >= 0 else { throw parser.fail("a change needs a path and a version") }
        // The document names the same path: validate it once.
        let path: DocumentPath
        if documentsPath, let document {
            path = document.path
        } else if let pathText, document?.path.description == pathText, let document {
            path = document.path
        } else {
            path = try DocumentPath(pathText ?? "")
        }
        var change = RemoteChange(path: path, document: document, version: Version(UInt64(version)), mutationID: fields.mutationID)
        change.encodedData = fields.encodedData
        return change
    }

    /// `{"createTime", "data", "path", "updateTime", "version"}`. `encodedData` gets the text of the
    /// data as it came.
    private static func readDocument(_ parser: inout JSONParser, encodedData: inout String?) throws(TandemError) -> Document {
        var data: JSONObject?
        var path: DocumentPath?
        var version: Int?
        var createTime: Date?
        var updateTime: Date?
        try parser.readObject { (parser, key) throws(TandemError) in
            switch key {
            case "createTime": createTime = try parser.readPlainString(WireTimestamp.parse(utf8:))
            case "updateTime": updateTime = try parser.readPlainString(WireTimestamp.parse(utf8:))
            case "data":
                let start = parser.index
                guard case .object(let object) = try parser.parseValue() else { throw parser.fail("a document's data must be an object") }
                data = object
                encodedData = String(decoding: UnsafeBufferPointer(rebasing: parser.bytes[start..<parser.index]), as: UTF8.self)
            case "path": path = try DocumentPath(try parser.readString())
            case "version": version = try parser.readInt()
            default: _ = try parser.parseValue()
            }
        }
        guard let data, let path, let version, version >= 0, let createTime, let updateTime else {
            throw parser.fail("a document needs its data, path, version, createTime and updateTime")
        }
        return Document(path: path, data: data, version: Version(UInt64(version)), createTime: createTime, updateTime: updateTime)
    }
}
