import Foundation
import TandemCore

/// A value kept in synced state (``SyncedCollection``): a stable identity in the app, and the id of
/// the document it is stored as, once there is one.
///
/// ```swift
/// struct Todo: DocumentIdentifiable {
///     var clientId = UUID()
///     var documentId: String?
///     var memo: String
///     var completed = false
/// }
/// ```
///
/// - `clientId` identifies the element in the app (SwiftUI's `ForEach`, `IdentifiedArray`) and never
///   changes, whatever the server does; it is never stored in the document.
/// - `documentId` is nil until the element is stored: the first edit that adds it gives it an id at
///   once, written back into the element, so a second edit before the server answers updates that
///   document instead of making another. It is never stored in the document's fields either: it is
///   the document's id.
///
/// Equatable, so an edit encodes only the elements it changed.
public protocol DocumentIdentifiable: Identifiable, Codable, Equatable, Sendable where ID == UUID {
    /// The element's identity in the app: stable, and never stored in the document.
    var clientId: UUID { get set }
    /// The id of the document the element is stored as; nil until the first edit that adds it.
    var documentId: String? { get set }
}

extension DocumentIdentifiable {
    /// The element's `clientId`.
    public var id: UUID { clientId }
}

/// The keys of a ``DocumentIdentifiable`` value that are identity, not fields.
enum SyncedKeys {
    static let clientId = "clientId"
    static let documentId = "documentId"

    /// A value's document fields: its encoding, identity keys removed.
    static func body<Value: DocumentIdentifiable>(of value: Value) throws -> JSONObject {
        var body = try JSONValueEncoder().encodeObject(value)
        body.removeValue(forKey: clientId)
        body.removeValue(forKey: documentId)
        return body
    }

    /// A value from a document's fields, with the identity the app knows it by.
    static func value<Value: DocumentIdentifiable>(_ type: Value.Type, from fields: JSONObject, clientId: UUID, documentId: String) throws -> Value {
        var object = fields
        object[Self.clientId] = .string(clientId.uuidString)
        object[Self.documentId] = .string(documentId)
        var value = try JSONValueDecoder().decode(Value.self, from: object)
        // Whatever the type's coding does with them, the identity is the one given.
        value.clientId = clientId
        value.documentId = documentId
        return value
    }

    /// A new document id: 20 letters and digits, as random as a UUID.
    static func newDocumentID() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<20).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] })
    }
}

/// A document as the synced state's engine keeps it: its fields, undecoded. The handle decodes them
/// into the app's values, with the identity it keeps for each.
package struct SyncedRow: SyncModel {
    package var id: String
    package var fields: JSONObject

    package init(from decoder: any Decoder) throws {
        fields = try decoder.singleValueContainer().decode(JSONValue.self).objectValue ?? [:]
        id = fields["id"]?.stringValue ?? ""
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(JSONValue.object(fields))
    }
}
