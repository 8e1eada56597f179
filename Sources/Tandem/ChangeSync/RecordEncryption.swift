import Crypto
import Foundation
import TandemCore

/// The keys a ``ChangeSyncEngine`` seals `.encryptedValue` properties with, on this device, with
/// AES-GCM: the server stores and sends only ciphertext. Each sealed value names its key, so keys
/// rotate: new values are sealed with ``currentKeyID``, and every key still given opens the values
/// sealed with it.
///
/// ```swift
/// let encryption = try RecordEncryption(currentKeyID: "2026-11", keys: ["2026-11": newKey, "2026-05": oldKey])
/// ```
public struct RecordEncryption: Sendable {
    /// The id of the key new values are sealed with.
    public let currentKeyID: String
    private let keys: [String: SymmetricKey]

    /// - Parameters:
    ///   - currentKeyID: the key new values are sealed with; it must be among `keys`.
    ///   - keys: 256-bit keys by id.
    public init(currentKeyID: String, keys: [String: SymmetricKey]) throws(TandemError) {
        guard let current = keys[currentKeyID] else {
            throw TandemError.invalidArgument("The current key '\(currentKeyID)' is not among the keys given (\(keys.keys.sorted().joined(separator: ", "))).")
        }
        guard current.bitCount == 256, keys.values.allSatisfy({ $0.bitCount == 256 }) else {
            throw TandemError.invalidArgument("Record keys are 256 bits (SymmetricKey(size: .bits256)); one given is not.")
        }
        guard !currentKeyID.isEmpty, !currentKeyID.contains(":") else {
            throw TandemError.invalidArgument("A key id is not empty and holds no ':'.")
        }
        self.currentKeyID = currentKeyID
        self.keys = keys
    }

    /// One key.
    public init(keyID: String, key: SymmetricKey) throws(TandemError) {
        try self.init(currentKeyID: keyID, keys: [keyID: key])
    }

    /// `value` sealed for `property` of record `recordID`: the key's id, and the nonce, ciphertext
    /// and tag in base64. The record and property are authenticated with it, so a sealed value
    /// moved to another record or property does not open.
    func seal(_ value: JSONValue, recordID: String, property: String) throws -> JSONValue {
        let plaintext = Data(JSONText.encode(value).utf8)
        let box = try AES.GCM.seal(plaintext, using: keys[currentKeyID]!, authenticating: Self.context(recordID, property))
        guard let combined = box.combined else {
            throw TandemError(.internal, "AES-GCM gave no combined box.")
        }
        return .object(["key": .string(currentKeyID), "box": .string(combined.base64EncodedString())])
    }

    /// The value sealed by ``seal(_:recordID:property:)``, or a typed error naming the record.
    func open(_ sealed: JSONValue, recordID: String, property: String) throws(RecordEncryptionError) -> JSONValue {
        guard case .object(let fields) = sealed, let keyID = fields["key"]?.stringValue, let text = fields["box"]?.stringValue,
              let combined = Data(base64Encoded: text) else {
            throw RecordEncryptionError(recordID: recordID, property: property, reason: .malformed)
        }
        guard let key = keys[keyID] else {
            throw RecordEncryptionError(recordID: recordID, property: property, reason: .missingKey(keyID))
        }
        let plaintext: Data
        do {
            plaintext = try AES.GCM.open(try AES.GCM.SealedBox(combined: combined), using: key, authenticating: Self.context(recordID, property))
        } catch {
            throw RecordEncryptionError(recordID: recordID, property: property, reason: .cannotOpen(keyID))
        }
        do {
            return try JSONText.parse(bytes: plaintext)
        } catch {
            throw RecordEncryptionError(recordID: recordID, property: property, reason: .malformed)
        }
    }

    private static func context(_ recordID: String, _ property: String) -> Data {
        Data("tandem-record/\(recordID)/\(property)".utf8)
    }
}

/// A sealed property that could not be opened (or sealed): which record and property, and why.
/// Never garbage: a value either opens whole, authenticated, or is this error.
public struct RecordEncryptionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Why a property could not be opened or sealed.
    public enum Reason: Sendable, Hashable {
        /// Sealed with a key this engine was not given.
        case missingKey(String)
        /// The key of that id does not open it: another key under the same id, or the value was
        /// changed or moved.
        case cannotOpen(String)
        /// Not a sealed value at all.
        case malformed
        /// The record has an encrypted property and the engine was given no keys.
        case noEncryption
    }

    /// The id of the record.
    public let recordID: String
    /// The name of the property.
    public let property: String
    /// Why it could not be opened or sealed.
    public let reason: Reason

    public var description: String {
        switch reason {
        case .missingKey(let key):
            "Record '\(recordID)': property '\(property)' is sealed with key '\(key)', which this engine was not given; add it to RecordEncryption's keys."
        case .cannotOpen(let key):
            "Record '\(recordID)': property '\(property)' does not open with key '\(key)': the key is not the one it was sealed with, or the value was altered."
        case .malformed:
            "Record '\(recordID)': property '\(property)' is not a sealed value."
        case .noEncryption:
            "Record '\(recordID)': property '\(property)' is an encryptedValue, and the engine has no RecordEncryption; give it one."
        }
    }
}
