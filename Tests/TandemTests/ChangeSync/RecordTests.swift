import Crypto
import Foundation
import Testing
@testable import Tandem
import TandemCore

/// Records as the change-sync engine stores them: sealed properties, stamps, conflicts.
@Suite("Change sync records")
struct RecordTests {
    static let key1 = SymmetricKey(size: .bits256)
    static let key2 = SymmetricKey(size: .bits256)

    static func record(id: String = "n1", _ properties: [String: SyncableValue], stamps: [String: HLCTimestamp] = [:], version: UInt64 = 3) -> SyncedRecord {
        SyncedRecord(id: id, type: "Note", properties: properties, metadata: RecordMetadata(version: Version(version), stamps: stamps))
    }

    @Test("a record's fields round-trip through its document: plain ones as fields, sealed ones as ciphertext only, its type and stamps beside them")
    func roundTrip() throws {
        let encryption = try RecordEncryption(keyID: "k1", key: Self.key1)
        let stamp = HLCTimestamp(wallMilliseconds: 1_700_000_000_000, counter: 2, node: "phone")
        let record = Self.record(["title": .value("Groceries"), "body": .encryptedValue(.object(["text": "eggs, milk", "pinned": true]))],
                                 stamps: ["title": stamp])
        let fields = try RecordCoding.fields(of: record, encryption: encryption)
        #expect(fields["title"] == "Groceries" && fields["_type"] == "Note" && fields["body"] == nil)
        #expect(fields["_stamps"] == .object(["title": .string(stamp.description)]))
        let text = JSONText.encode(.object(fields))
        #expect(!text.contains("eggs") && !text.contains("pinned"), "no plaintext of a sealed property: \(text)")
        let back = try RecordCoding.record(id: "n1", fields: fields, version: Version(3), encryption: encryption)
        #expect(back == record)
    }

    @Test("keys rotate: values sealed with an older key open while it is given; a missing key, another key under the same id, a moved box, or no keys at all are typed errors naming the record")
    func keys() throws {
        let old = try RecordEncryption(keyID: "k1", key: Self.key1)
        let sealedOld = try RecordCoding.fields(of: Self.record(["secret": .encryptedValue("one")]), encryption: old)
        let rotated = try RecordEncryption(currentKeyID: "k2", keys: ["k1": Self.key1, "k2": Self.key2])
        let sealedNew = try RecordCoding.fields(of: Self.record(["secret": .encryptedValue("two")]), encryption: rotated)
        #expect(try RecordCoding.record(id: "n1", fields: sealedOld, version: 1, encryption: rotated)["secret"] == "one")
        #expect(try RecordCoding.record(id: "n1", fields: sealedNew, version: 1, encryption: rotated)["secret"] == "two")

        #expect(throws: RecordEncryptionError(recordID: "n1", property: "secret", reason: .missingKey("k2"))) {
            try RecordCoding.record(id: "n1", fields: sealedNew, version: 1, encryption: old)
        }
        let impostor = try RecordEncryption(keyID: "k1", key: Self.key2)
        #expect(throws: RecordEncryptionError(recordID: "n1", property: "secret", reason: .cannotOpen("k1"))) {
            try RecordCoding.record(id: "n1", fields: sealedOld, version: 1, encryption: impostor)
        }
        // The same box under another record or property does not open.
        #expect(throws: RecordEncryptionError(recordID: "n2", property: "secret", reason: .cannotOpen("k1"))) {
            try RecordCoding.record(id: "n2", fields: sealedOld, version: 1, encryption: old)
        }
        var moved = sealedOld
        moved["_sealed"] = .object(["other": sealedOld["_sealed"]!.objectValue!["secret"]!])
        #expect(throws: RecordEncryptionError(recordID: "n1", property: "other", reason: .cannotOpen("k1"))) {
            try RecordCoding.record(id: "n1", fields: moved, version: 1, encryption: old)
        }
        #expect(throws: RecordEncryptionError(recordID: "n1", property: "secret", reason: .noEncryption)) {
            try RecordCoding.record(id: "n1", fields: sealedOld, version: 1, encryption: nil)
        }
        #expect(throws: RecordEncryptionError(recordID: "n1", property: "secret", reason: .noEncryption)) {
            try RecordCoding.fields(of: Self.record(["secret": .encryptedValue("x")]), encryption: nil)
        }
        #expect(RecordEncryptionError(recordID: "n1", property: "secret", reason: .missingKey("k9")).description.contains("Record 'n1'"))
        #expect(throws: TandemError.self) { try RecordEncryption(currentKeyID: "k3", keys: ["k1": Self.key1]) }
        #expect(throws: TandemError.self) { try RecordEncryption(keyID: "short", key: SymmetricKey(size: .bits128)) }
    }

    @Test("property names and record ids are checked before anything is stored")
    func names() {
        #expect(throws: TandemError.self) { try RecordCoding.fields(of: Self.record(["_type": .value(1)]), encryption: nil) }
        #expect(throws: TandemError.self) { try RecordCoding.fields(of: Self.record(["a.b": .value(1)]), encryption: nil) }
        #expect(throws: TandemError.self) { try RecordCoding.fields(of: Self.record(id: "a/b", ["a": .value(1)]), encryption: nil) }
        #expect((try? RecordCoding.fields(of: Self.record(["snake_case2": .value(1)]), encryption: nil)) != nil)
    }

    @Test("a hybrid logical clock never goes back, follows the wall clock, and stamps after every stamp it has seen")
    func clock() {
        var phone = HybridLogicalClock(node: "phone")
        let a = phone.stamp(wall: 1_000)
        let b = phone.stamp(wall: 1_000)
        let c = phone.stamp(wall: 900)                      // the wall clock stepped back
        let d = phone.stamp(wall: 2_000)
        #expect(a < b && b < c && c < d)
        #expect(c.wallMilliseconds == 1_000 && c.counter == 2 && d.counter == 0)
        // A stamp from a laptop ten minutes ahead: the phone's next stamps come after it.
        let ahead = HLCTimestamp(wallMilliseconds: 602_000, counter: 5, node: "laptop")
        phone.observe(ahead, wall: 2_100)
        let e = phone.stamp(wall: 2_200)
        #expect(e > ahead && e.wallMilliseconds == 602_000 && e.counter == 6)
        // Ties go by node id; text round-trips.
        #expect(HLCTimestamp(wallMilliseconds: 5, counter: 1, node: "a") < HLCTimestamp(wallMilliseconds: 5, counter: 1, node: "b"))
        #expect(HLCTimestamp(e.description) == e && HLCTimestamp("x-1-a") == nil && HLCTimestamp("1-2-node-with-dashes")?.node == "node-with-dashes")
        for malformed in ["", "1-2-", "-1-a", "1--a", "1-2", "1a-2-n", "99999999999999999999-0-a", "9223372036854775808-0-a", "1-4294967296-a", "+1-2-a"] {
            #expect(HLCTimestamp(malformed) == nil, "\(malformed)")
        }
        #expect(HLCTimestamp("9223372036854775807-4294967295-née") == HLCTimestamp(wallMilliseconds: .max, counter: .max, node: "née"))
    }

    @Test("field-level last writer wins: each property from the side whose stamp is later, deletions included; both sides choose the same record")
    func fieldMerge() {
        let early = HLCTimestamp(wallMilliseconds: 100, counter: 0, node: "laptop")
        let late = HLCTimestamp(wallMilliseconds: 200, counter: 0, node: "phone")
        let client = Self.record(["title": .value("mine"), "color": .value("red")],
                                 stamps: ["title": late, "color": early, "done": late], version: 3)
        let server = Self.record(["title": .value("theirs"), "color": .value("blue"), "done": .value(true)],
                                 stamps: ["title": early, "color": late, "done": early], version: 7)
        let merged = ConflictResolver.fieldLevelLastWriterWins.resolve(RecordConflict(base: nil, client: client, server: server))
        #expect(merged?["title"] == "mine" && merged?["color"] == "blue" && merged?["done"] == nil)
        #expect(merged?.metadata.version == Version(7) && merged?.metadata.stamps["done"] == late)
        // The other device, meeting the mirror conflict, ends with the same record.
        var mirrorClient = server
        mirrorClient.metadata.version = Version(7)
        var mirrorServer = merged!
        mirrorServer.metadata.version = Version(8)
        let again = FieldMerge.lastWriterWins(client: mirrorClient, server: mirrorServer)
        #expect(again.properties == merged!.properties)
        // No stamps on either side: the server's stays.
        let plain = FieldMerge.lastWriterWins(client: Self.record(["a": .value(1)]), server: Self.record(["a": .value(2)]))
        #expect(plain["a"] == 2)
    }
}
