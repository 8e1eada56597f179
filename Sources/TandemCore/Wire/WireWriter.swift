/// Writes wire messages straight to UTF-8 bytes, with their keys in the same sorted order
/// `JSONText.encode` uses, so the hot messages (change batches, documents) skip building a
/// `JSONValue` tree first.
package struct WireWriter {
    package private(set) var bytes: [UInt8] = []

    package init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    package mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    package mutating func raw(_ other: [UInt8]) {
        bytes.append(contentsOf: other)
    }

    /// Text written as it is: the caller knows it needs no escaping.
    package mutating func raw(unescaped text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    package mutating func int(_ value: Int) {
        JSONText.writeInt(value, to: &bytes)
    }

    package mutating func string(_ value: String) {
        JSONText.writeString(value, to: &bytes)
    }

    package mutating func value(_ value: JSONValue) {
        JSONText.write(value, to: &bytes)
    }

    package var text: String { String(decoding: bytes, as: UTF8.self) }

    /// A mutation as `Mutation.wireValue` spells it; sets and deletions without transforms
    /// without building that value first.
    package mutating func mutation(_ mutation: Mutation) {
        let op: StaticString
        switch mutation.kind {
        case .set(let data) where mutation.transforms.isEmpty:
            raw(#"{"data":"#)
            if var text = mutation.encodedData {
                text.withUTF8 { bytes.append(contentsOf: $0) }
            } else {
                value(.object(data))
            }
            raw(",")
            op = #""op":"set","path":"#
        case .delete:
            raw("{")
            op = #""op":"delete","path":"#
        default:
            value(mutation.wireValue)
            return
        }
        if let id = mutation.id {
            raw(#""id":{"client":"#)
            string(id.clientID)
            raw(#","sequence":"#)
            int(Int(clamping: id.sequence))
            raw("},")
        }
        raw(op)
        string(mutation.path.description)
        switch mutation.precondition {
        case .exists(let exists)?:
            raw(exists ? #","precondition":{"exists":true}"# : #","precondition":{"exists":false}"#)
        case .version(let version)?:
            raw(#","precondition":{"version":"#)
            int(Int(clamping: version.rawValue))
            raw("}")
        case nil:
            break
        }
        raw("}")
    }

    /// `{"createTime","data","path","updateTime","version"}`.
    package mutating func document(_ document: Document) {
        self.document(document) { $0.value(.object(document.data)) }
    }

    /// As ``document(_:)``, with the data already written as compact JSON text.
    package mutating func document(_ document: Document, encodedData: String) {
        self.document(document) { writer in
            var text = encodedData
            text.withUTF8 { writer.bytes.append(contentsOf: $0) }
        }
    }

    private mutating func document(_ document: Document, data: (inout WireWriter) -> Void) {
        raw(#"{"createTime":""#)
        WireTimestamp.write(milliseconds: WireTimestamp.milliseconds(document.createTime), to: &bytes)
        raw(#"","data":"#)
        data(&self)
        raw(#","path":"#)
        string(document.path.description)
        raw(#","updateTime":""#)
        WireTimestamp.write(milliseconds: WireTimestamp.milliseconds(document.updateTime), to: &bytes)
        raw(#"","version":"#)
        int(Int(clamping: document.version.rawValue))
        raw("}")
    }

    /// The change `{"document","path","version"}` of a document as a store keeps it: its path as
    /// UTF-8, its body already compact JSON text (which the store wrote itself, so it is copied, not
    /// parsed and written again), its times in milliseconds since 1970.
    package mutating func storedChange(
        path: UnsafeBufferPointer<UInt8>, version: Int64, createMilliseconds: Int64, updateMilliseconds: Int64,
        body: UnsafeBufferPointer<UInt8>
    ) {
        raw(#"{"document":{"createTime":""#)
        WireTimestamp.write(milliseconds: createMilliseconds, to: &bytes)
        raw(#"","data":"#)
        bytes.append(contentsOf: body)
        raw(#","path":"#)
        JSONText.writeString(utf8: path, to: &bytes)
        raw(#","updateTime":""#)
        WireTimestamp.write(milliseconds: updateMilliseconds, to: &bytes)
        raw(#"","version":"#)
        int(Int(clamping: version))
        raw(#"},"path":"#)
        JSONText.writeString(utf8: path, to: &bytes)
        raw(#","version":"#)
        int(Int(clamping: version))
        raw("}")
    }

    /// `{"document","mutationId"?,"path","version"}`.
    package mutating func change(_ change: RemoteChange) {
        raw(#"{"document":"#)
        if let document = change.document { self.document(document) } else { raw("null") }
        if let id = change.mutationID { mutationID(id) }
        raw(#","path":"#)
        string(change.path.description)
        raw(#","version":"#)
        int(Int(clamping: change.version.rawValue))
        raw("}")
    }

    /// `{"document","error"?,"mutationId"?,"status","version"}`, the data copied from `encodedData`
    /// when it is known.
    package mutating func acknowledgement(_ acknowledgement: WriteAcknowledgement) {
        raw(acknowledgement.isConcealed ? #"{"concealed":true,"document":"# : #"{"document":"#)
        if let document = acknowledgement.document {
            if let data = acknowledgement.encodedData {
                self.document(document, encodedData: data)
            } else {
                self.document(document)
            }
        } else {
            raw("null")
        }
        if let error = acknowledgement.error {
            raw(#","error":{"code":"#)
            string(error.code.rawValue)
            raw(#","message":"#)
            string(error.message)
            raw("}")
        }
        if let id = acknowledgement.id { mutationID(id) }
        raw(#","status":""#)
        switch acknowledgement.status {
        case .applied: raw("applied")
        case .replayed: raw("replayed")
        case .refused: raw("refused")
        case .unknown: raw("unknown")
        }
        raw(#"","version":"#)
        int(Int(clamping: acknowledgement.version.rawValue))
        raw("}")
    }

    /// `,"mutationId":{"client","sequence"}`.
    private mutating func mutationID(_ id: MutationID) {
        raw(#","mutationId":{"client":"#)
        string(id.clientID)
        raw(#","sequence":"#)
        int(Int(clamping: id.sequence))
        raw("}")
    }

    /// A JSON array of changes, written once and shared by every listener a commit goes to.
    package static func changes(_ changes: some Collection<RemoteChange>) -> [UInt8] {
        var writer = WireWriter(capacity: 64 + changes.count * 160)
        writer.array(changes) { $0.change($1) }
        return writer.bytes
    }

    /// `[…]`, each element written by `element`.
    package mutating func array<Elements: Collection>(_ elements: Elements, _ element: (inout WireWriter, Elements.Element) -> Void) {
        raw("[")
        var first = true
        for item in elements {
            if !first { raw(",") }
            first = false
            element(&self, item)
        }
        raw("]")
    }

    /// A `snapshot` or `changes` message around an already written changes array.
    package static func batch(target: Int, changes: [UInt8], version: Version, isSnapshot: Bool, reset: Bool, more: Bool) -> String {
        String(decoding: batchBytes(target: target, changes: changes, version: version, isSnapshot: isSnapshot, reset: reset, more: more), as: UTF8.self)
    }

    /// As ``batch(target:changes:version:isSnapshot:reset:more:)``, as UTF-8 bytes.
    package static func batchBytes(target: Int, changes: [UInt8], version: Version, isSnapshot: Bool, reset: Bool, more: Bool) -> [UInt8] {
        var writer = WireWriter(capacity: changes.count + 96)
        writer.raw(#"{"changes":"#)
        writer.raw(changes)
        if more { writer.raw(#","more":true"#) }
        if reset { writer.raw(#","reset":true"#) }
        writer.raw(#","target":"#)
        writer.int(target)
        writer.raw(isSnapshot ? #","type":"snapshot","version":"# : #","type":"changes","version":"#)
        writer.int(Int(clamping: version.rawValue))
        writer.raw("}")
        return writer.bytes
    }
}

extension WireWriter {
    /// A `changes` message for several listeners, around an already written changes array.
    package static func sharedBatch(targets: [Int], changes: [UInt8], version: Version) -> String {
        String(decoding: sharedBatchBytes(targets: targets, changes: changes, version: version), as: UTF8.self)
    }

    /// As ``sharedBatch(targets:changes:version:)``, as UTF-8 bytes.
    package static func sharedBatchBytes(targets: [Int], changes: [UInt8], version: Version) -> [UInt8] {
        var writer = WireWriter(capacity: changes.count + 64 + targets.count * 6)
        writer.raw(#"{"changes":"#)
        writer.raw(changes)
        writer.raw(#","targets":"#)
        writer.array(targets) { $0.int($1) }
        writer.raw(#","type":"changes","version":"#)
        writer.int(Int(clamping: version.rawValue))
        writer.raw("}")
        return writer.bytes
    }
}

extension ServerMessage {
    /// The message as JSON text; batches and documents are written directly.
    public var text: String {
        switch self {
        case .batch(let target, let batch, let reset, let more):
            return WireWriter.batch(target: target, changes: WireWriter.changes(batch.changes), version: batch.version,
                                    isSnapshot: batch.isSnapshot, reset: reset, more: more)
        case .sharedBatch(let targets, let batch):
            return WireWriter.sharedBatch(targets: targets, changes: WireWriter.changes(batch.changes), version: batch.version)
        case .documents(let id, let documents, let version):
            var writer = WireWriter(capacity: 64 + documents.count * 160)
            writer.raw(#"{"documents":"#)
            writer.array(documents) { $0.document($1) }
            writer.raw(#","id":"#)
            writer.int(id)
            writer.raw(#","type":"documents","version":"#)
            writer.int(Int(clamping: version.rawValue))
            writer.raw("}")
            return writer.text
        case .page(let id, let page):
            let changes = WireWriter.changes(page.changes)
            var writer = WireWriter(capacity: changes.count + 96)
            writer.raw(#"{"changes":"#)
            writer.raw(changes)
            writer.raw(page.hasMore ? #","hasMore":true,"id":"# : #","hasMore":false,"id":"#)
            writer.int(id)
            writer.raw(#","type":"page","version":"#)
            writer.int(Int(clamping: page.version.rawValue))
            writer.raw("}")
            return writer.text
        case .ack(let id, let acknowledgements):
            var writer = WireWriter(capacity: 48 + acknowledgements.count * 200)
            writer.raw(#"{"id":"#)
            writer.int(id)
            writer.raw(#","results":"#)
            writer.array(acknowledgements) { $0.acknowledgement($1) }
            writer.raw(#","type":"ack"}"#)
            return writer.text
        default:
            return JSONText.encode(wireValue)
        }
    }
}
