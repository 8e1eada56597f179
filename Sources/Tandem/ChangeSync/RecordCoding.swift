import TandemCore

/// How a ``SyncedRecord`` is stored as a document: its plain properties as fields, its type in
/// `_type`, its sealed properties in `_sealed` (each the key's id and the sealed box), and each
/// property's last-change stamp in `_stamps`.
enum RecordCoding {
    /// Checks that `record` can be stored (its id, its properties' names, keys for its encrypted
    /// properties) without sealing anything.
    static func validate(_ record: SyncedRecord, encryption: RecordEncryption?) throws {
        guard RecordFields.isValidID(record.id) else {
            throw TandemError.invalidArgument("'\(record.id)' cannot name a record: ids are not empty, hold no '/', and are not '.' or '..'.")
        }
        for (name, property) in record.properties {
            guard RecordFields.isValidProperty(name) else {
                throw TandemError.invalidArgument("Record '\(record.id)': '\(name)' cannot name a property: letters, digits and '_', not starting with '_', at most 255 characters.")
            }
            if property.isEncrypted && encryption == nil {
                throw RecordEncryptionError(recordID: record.id, property: name, reason: .noEncryption)
            }
        }
    }

    /// The document fields of `record`, its encrypted properties sealed.
    static func fields(of record: SyncedRecord, encryption: RecordEncryption?) throws -> JSONObject {
        guard RecordFields.isValidID(record.id) else {
            throw TandemError.invalidArgument("'\(record.id)' cannot name a record: ids are not empty, hold no '/', and are not '.' or '..'.")
        }
        var fields: JSONObject = [RecordFields.type: .string(record.type)]
        var sealed: JSONObject = [:]
        for (name, property) in record.properties {
            guard RecordFields.isValidProperty(name) else {
                throw TandemError.invalidArgument("Record '\(record.id)': '\(name)' cannot name a property: letters, digits and '_', not starting with '_', at most 255 characters.")
            }
            switch property {
            case .value(let value):
                fields[name] = value
            case .encryptedValue(let value):
                guard let encryption else {
                    throw RecordEncryptionError(recordID: record.id, property: name, reason: .noEncryption)
                }
                sealed[name] = try encryption.seal(value, recordID: record.id, property: name)
            }
        }
        if !sealed.isEmpty { fields[RecordFields.sealed] = .object(sealed) }
        if !record.metadata.stamps.isEmpty {
            fields[RecordFields.stamps] = .object(record.metadata.stamps.mapValues { .string($0.description) })
        }
        return fields
    }

    /// The record a stored document holds, its sealed properties opened.
    static func record(id: String, fields: JSONObject, version: Version, encryption: RecordEncryption?) throws -> SyncedRecord {
        var properties: [String: SyncableValue] = [:]
        var stamps: [String: HLCTimestamp] = [:]
        for (name, value) in fields {
            switch name {
            case RecordFields.type:
                continue
            case RecordFields.sealed:
                guard case .object(let sealed) = value else {
                    throw RecordEncryptionError(recordID: id, property: name, reason: .malformed)
                }
                for (property, box) in sealed {
                    guard let encryption else {
                        throw RecordEncryptionError(recordID: id, property: property, reason: .noEncryption)
                    }
                    properties[property] = .encryptedValue(try encryption.open(box, recordID: id, property: property))
                }
            case RecordFields.stamps:
                if case .object(let object) = value {
                    for (property, text) in object {
                        if let text = text.stringValue, let stamp = HLCTimestamp(text) { stamps[property] = stamp }
                    }
                }
            default:
                if !name.hasPrefix("_") { properties[name] = .value(value) }
            }
        }
        return SyncedRecord(id: id, type: fields[RecordFields.type]?.stringValue ?? "", properties: properties,
                            metadata: RecordMetadata(version: version, stamps: stamps))
    }
}
