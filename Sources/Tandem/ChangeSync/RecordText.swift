import Foundation
import GRDB
import TandemCore

extension ChangeQueueStore.Row: FetchableRecord {
    init(row: GRDB.Row) throws {
        let recordID: String = row["record_id"]
        let recordText: String? = row["record"]
        let sequence: Int64? = row["sequence"]
        let precondition = (row["precondition"] as Int64?).map { UInt64(max(0, $0)) }
        self.init(rowID: row["row_id"], recordID: recordID, recordType: row["record_type"], isDeletion: row["is_deletion"],
                  record: recordText.flatMap { RecordText.decode($0, id: recordID, version: Version(precondition ?? 0)) }, text: recordText, bytes: row["bytes"],
                  sequence: sequence.map { UInt64(max(0, $0)) }, data: row["data"], precondition: precondition, alone: row["alone"])
    }
}

/// A record as the engine's queue keeps it: the document it is sent as, its encrypted properties
/// in the clear under `_clear` (the file stays on the device). A record with none is kept as the
/// exact text that is sent, so sending it encodes nothing again. Its version is kept apart (the
/// `precondition` column), as the document has none.
enum RecordText {
    static let clear = "_clear"

    static func encode(_ record: SyncedRecord) -> String {
        var writer = WireWriter(capacity: 96 + record.properties.count * 48)
        writer.raw(#"{"_type":"#)
        writer.string(record.type)
        var clear: [(String, JSONValue)] = []
        for (name, property) in record.properties {
            switch property {
            case .value(let value):
                writer.raw(",")
                writer.string(name)
                writer.raw(":")
                writer.value(value)
            case .encryptedValue(let value):
                clear.append((name, value))
            }
        }
        if !clear.isEmpty {
            writer.raw(#","_clear":{"#)
            for (index, (name, value)) in clear.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(name)
                writer.raw(":")
                writer.value(value)
            }
            writer.raw("}")
        }
        if !record.metadata.stamps.isEmpty {
            writer.raw(#","_stamps":{"#)
            var first = true
            for (name, stamp) in record.metadata.stamps {
                if !first { writer.raw(",") }
                first = false
                writer.string(name)
                writer.raw(":")
                Self.write(stamp, to: &writer)
            }
            writer.raw("}")
        }
        writer.raw("}")
        return writer.text
    }

    /// A stamp as its description, in quotes, without building that string first when its node
    /// needs no escaping (a client id nearly always).
    static func write(_ stamp: HLCTimestamp, to writer: inout WireWriter) {
        guard stamp.node.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x80 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else {
            writer.string(stamp.description)
            return
        }
        writer.raw("\"")
        writer.int(Int(stamp.wallMilliseconds))
        writer.raw("-")
        writer.int(Int(stamp.counter))
        writer.raw("-")
        writer.raw(unescaped: stamp.node)
        writer.raw("\"")
    }

    static func decode(_ text: String, id: String, version: Version) -> SyncedRecord? {
        guard case .object(var fields)? = try? JSONText.parse(text) else { return nil }
        let clear = fields.removeValue(forKey: clear)
        guard var record = try? RecordCoding.record(id: id, fields: fields, version: version, encryption: nil) else { return nil }
        if case .object(let values)? = clear {
            for (name, value) in values { record.properties[name] = .encryptedValue(value) }
        }
        return record
    }

    /// Whether a record is kept as the text it is sent as (it has no encrypted property).
    static func isSentAsKept(_ record: SyncedRecord) -> Bool {
        !record.properties.values.contains { $0.isEncrypted }
    }

    /// A record as the first schema kept it: `{"type", "version", "properties": {name: {"value" |
    /// "encrypted": …}}, "stamps": {name: "wall-counter-node"}}`.
    static func decodeFirstSchema(_ text: String, id: String) -> SyncedRecord? {
        guard case .object(let object)? = try? JSONText.parse(text), case .object(let stored)? = object["properties"] else { return nil }
        var properties: [String: SyncableValue] = [:]
        for (name, entry) in stored {
            if let value = entry[field: "value"] {
                properties[name] = .value(value)
            } else if let value = entry[field: "encrypted"] {
                properties[name] = .encryptedValue(value)
            }
        }
        var stamps: [String: HLCTimestamp] = [:]
        if case .object(let texts)? = object["stamps"] {
            for (name, text) in texts { if let stamp = text.stringValue.flatMap(HLCTimestamp.init) { stamps[name] = stamp } }
        }
        let version: UInt64
        if case .int(let number)? = object["version"], number >= 0 { version = UInt64(number) } else { version = 0 }
        return SyncedRecord(id: id, type: object["type"]?.stringValue ?? "", properties: properties,
                            metadata: RecordMetadata(version: Version(version), stamps: stamps))
    }
}
