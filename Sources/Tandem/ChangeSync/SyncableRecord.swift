import Foundation
import TandemCore

/// A property of a record synced by ``ChangeSyncEngine``: stored as it is, or sealed on this
/// device before it leaves (the server stores and sends only ciphertext).
public enum SyncableValue: Sendable, Hashable {
    /// A value stored as it is.
    case value(JSONValue)
    /// A value sealed on this device before it leaves (with the engine's `RecordEncryption`).
    case encryptedValue(JSONValue)

    /// The value, sealed or not.
    public var jsonValue: JSONValue {
        switch self {
        case .value(let value), .encryptedValue(let value): value
        }
    }

    /// Whether the value is sealed (`.encryptedValue`).
    public var isEncrypted: Bool {
        if case .encryptedValue = self { return true }
        return false
    }
}

/// A model an app syncs through ``ChangeSyncEngine`` from its own store (a GRDB table, files).
///
/// ```swift
/// struct Note: SyncableRecord {
///     var id: String
///     var title: String
///     var body: String
///     var recordMetadata: RecordMetadata?            // stored with the row; nil until first synced
///
///     var recordID: String { id }
///     var recordProperties: [String: SyncableValue] {
///         ["title": .value(.string(title)), "body": .encryptedValue(.string(body))]
///     }
/// }
/// ```
///
/// Property names are letters, digits and `_`, not starting with `_` (those name the engine's own
/// fields), at most 255 characters.
public protocol SyncableRecord: Sendable {
    /// The record's type, stored beside its fields. Default: the type's name.
    static var recordType: String { get }
    /// Stable and unique within the zone; never changes.
    var recordID: String { get }
    /// The record's state, by property name. It is sent whole: a property left out is removed from
    /// the record on the server.
    var recordProperties: [String: SyncableValue] { get }
    /// What the engine last handed back for this record (the version it was based on): store it
    /// with the record, and keep it current from the engine's fetch and send callbacks. Nil for a
    /// record never synced.
    var recordMetadata: RecordMetadata? { get }
}

extension SyncableRecord {
    public static var recordType: String { String(describing: Self.self) }
}

/// The engine's opaque metadata of a record: the server version it was based on, and the
/// hybrid-logical-clock stamp of each property's last change.
public struct RecordMetadata: Sendable, Hashable, Codable {
    /// The server's version of the record this state is based on (0: never stored).
    public var version: Version
    /// Each property's last change, for field-level merges.
    public var stamps: [String: HLCTimestamp]

    /// Metadata at the server's version `version` (0: never stored), with these property stamps.
    public init(version: Version, stamps: [String: HLCTimestamp] = [:]) {
        self.version = version
        self.stamps = stamps
    }
}

/// A record as the engine hands it to the app: fetched, sent, or in a conflict. Its properties are
/// in the clear (sealed ones opened with the app's keys), each marked as it is stored.
public struct SyncedRecord: Sendable, Hashable {
    /// The record's id, unique within the zone.
    public var id: String
    /// The record's type (`SyncableRecord.recordType`); "" for a fetched record stored without one.
    public var type: String
    /// The record's properties by name, in the clear, each marked as it is stored (plain or sealed).
    public var properties: [String: SyncableValue]
    /// The server version this state is based on, and each property's stamp: store it with the
    /// record.
    public var metadata: RecordMetadata

    /// A record from its parts.
    public init(id: String, type: String, properties: [String: SyncableValue], metadata: RecordMetadata) {
        self.id = id
        self.type = type
        self.properties = properties
        self.metadata = metadata
    }

    /// The plain value of a property, sealed or not.
    public subscript(name: String) -> JSONValue? { properties[name]?.jsonValue }
}

extension SyncedRecord {
    /// A record from the app's model.
    public init<Record: SyncableRecord>(_ record: Record) {
        self.init(id: record.recordID, type: Record.recordType, properties: record.recordProperties,
                  metadata: record.recordMetadata ?? RecordMetadata(version: Version(0)))
    }
}

/// The names a record's stored document uses besides its properties.
enum RecordFields {
    static let type = "_type"
    static let sealed = "_sealed"
    static let stamps = "_stamps"

    /// Whether `name` may name a property.
    static func isValidProperty(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 255, !name.hasPrefix("_") else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
        }
    }

    /// Whether `id` may name a record (a document id: no `/`, not `.` or `..`, at most 1,500 bytes).
    static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 1_500 && !id.utf8.contains(UInt8(ascii: "/")) && id != "." && id != ".."
    }
}
