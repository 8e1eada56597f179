import Crypto
import Foundation
import GRDB
import Testing
@testable import Tandem
import TandemCore

/// The change-sync engine's file: what it keeps of a pending change before and after it is sent,
/// how an answer moves it to the record's base, and a file written by the first schema.
@Suite("Change sync queue file")
struct ChangeQueueStoreTests {
    static let records = try! CollectionPath("users/u1/zones/notes/records")

    static func note(_ id: String, _ title: String, version: UInt64 = 0, secret: String? = nil) -> SyncedRecord {
        var properties: [String: SyncableValue] = ["title": .value(.string(title))]
        if let secret { properties["secret"] = .encryptedValue(.string(secret)) }
        return SyncedRecord(id: id, type: "Note", properties: properties, metadata: RecordMetadata(version: Version(version)))
    }

    @Test("two connections to one file (a second engine of the zone): a change one queues again replaces the other's unsent change, and the other sends the new state, never the one it remembered")
    func secondConnectionReplaces() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("q.sqlite").path
        let first = try ChangeQueueStore(path: path)
        let second = try ChangeQueueStore(path: path)
        let queued = try first.enqueue(account: "u1", saves: [Self.note("n1", "a")], deletions: [])
        _ = try first.pending(account: "u1")
        let again = try second.enqueue(account: "u1", saves: [Self.note("n1", "b")], deletions: [])
        #expect(again[0].rowID == queued[0].rowID, "replaced in place")
        #expect(try first.newestQueued(account: "u1", ids: ["n1"])["n1"]?["title"] == "b")
        let sent = try first.prepare(account: "u1", records: Self.records, rowIDs: [queued[0].rowID]) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(sent[0].mutation?.kind == .set(["_type": "Note", "title": "b"]))
    }

    @Test("a record queued again before it is sent replaces its change; once sent, the next change is a new row after it, and is the newest queued state")
    func queuedAgain() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        let first = try store.enqueue(account: "u1", saves: [Self.note("n1", "a")], deletions: [])
        let again = try store.enqueue(account: "u1", saves: [Self.note("n1", "b")], deletions: [])
        #expect(again[0].rowID == first[0].rowID)
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: [first[0].rowID]) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(sent[0].mutation?.kind == .set(["_type": "Note", "title": "b"]))
        #expect(sent[0].mutation?.precondition == .exists(false))
        let next = try store.enqueue(account: "u1", saves: [Self.note("n1", "c")], deletions: [])
        #expect(next[0].rowID != first[0].rowID)
        let last = try store.enqueue(account: "u1", saves: [Self.note("n1", "d")], deletions: [])
        #expect(last[0].rowID == next[0].rowID)
        #expect(try store.newestQueued(account: "u1", ids: ["n1"])["n1"]?["title"] == "d")
        // Another process sees the same queue: the sent change first, with its mutation as sent.
        let reopened = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        let pending = try reopened.pending(account: "u1")
        #expect(pending.map(\.isSent) == [true, false])
        let again2 = try await reopened.prepare(account: "u1", records: Self.records, rowIDs: [pending[0].rowID]) { _ in
            Issue.record("a sent change is not encoded again")
            return [:]
        }
        #expect(again2[0].mutation == sent[0].mutation)
        #expect(try reopened.newestQueued(account: "u1", ids: ["n1"])["n1"]?["title"] == "d")
        // The queue read whole, a change queued again is found in memory; twice in one call, the
        // second replaces the first.
        let replaced = try reopened.enqueue(account: "u1", saves: [Self.note("n1", "e"), Self.note("n2", "x"), Self.note("n2", "y")], deletions: [])
        #expect(replaced[0].rowID == pending[1].rowID && replaced[1].rowID == replaced[2].rowID)
        #expect(try reopened.pending(account: "u1").map { $0.record?["title"] } == ["b", "e", "y"])
    }

    @Test("a batch prepared for one account never takes another account's rows, whether in memory or only in the file: they stay unsent in their own queue, and are numbered under their own writer when it sends them")
    func prepareKeepsToItsAccount() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("q.sqlite").path
        let store = try ChangeQueueStore(path: path)
        _ = try store.pending(account: "ada")
        let adas = try store.enqueue(account: "ada", saves: [Self.note("a1", "Ada's")], deletions: [])
        let bobs = try CollectionPath("users/bob/zones/notes/records")
        let fields: @Sendable (ChangeQueueStore.Row) throws -> JSONObject = { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        // Her row in memory (the queue was read whole, and it was just queued).
        #expect(try await store.prepare(account: "bob", records: bobs, rowIDs: adas.map(\.rowID), fields: fields).isEmpty)
        // Only in the file.
        let reopened = try ChangeQueueStore(path: path)
        #expect(try await reopened.prepare(account: "bob", records: bobs, rowIDs: adas.map(\.rowID), fields: fields).isEmpty)
        #expect(try reopened.pending(account: "ada").map(\.sequence) == [nil])
        #expect(try reopened.pending(account: "bob").isEmpty)
        let sent = try await reopened.prepare(account: "ada", records: try CollectionPath("users/ada/zones/notes/records"), rowIDs: adas.map(\.rowID), fields: fields)
        #expect(sent.map { $0.mutation?.id?.sequence } == [1])
        #expect(sent.first?.mutation?.path.description == "users/ada/zones/notes/records/a1")
    }

    @Test("many changes in one call, some records twice, across the inserts made together: each record gets one row, holding its last change, in the order queued")
    func manyInOneCall() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        _ = try store.pending(account: "u1")
        let saves = (0..<150).map { Self.note("n\($0)", "first \($0)") } + [Self.note("n3", "again"), Self.note("n100", "again")]
            + (150..<200).map { Self.note("n\($0)", "first \($0)") } + [Self.note("n3", "third")]
        let rows = try store.enqueue(account: "u1", saves: saves, deletions: [("n7", "Note"), ("gone", "Note")])
        #expect(rows.count == saves.count + 2)
        #expect(rows[150].rowID == rows[3].rowID && rows[151].rowID == rows[100].rowID && rows[202].rowID == rows[3].rowID && rows[203].rowID == rows[7].rowID)
        let pending = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path).pending(account: "u1")
        #expect(pending.count == 201)
        #expect(pending.map(\.recordID) == (0..<200).map { "n\($0)" } + ["gone"])
        #expect(pending[3].record?["title"] == "third" && pending[100].record?["title"] == "again" && pending[7].isDeletion && pending[8].record?["title"] == "first 8")
    }

    @Test("read again, sent changes come first in the order of their sequences (a resolution sent ahead of changes queued before it), then the others; a resolution gives way to a newer change of its record")
    func reloadOrder() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("q.sqlite").path
        let store = try ChangeQueueStore(path: path)
        _ = try store.pending(account: "u1")
        let early = try store.enqueue(account: "u1", saves: [Self.note("u1", "a"), Self.note("u2", "b")], deletions: [])
        let resolution = try store.enqueue(account: "u1", saves: [Self.note("r", "c")], deletions: [])
        _ = try store.enqueue(account: "u1", saves: [Self.note("u9", "d")], deletions: [])
        // The machine sends the resolution first: it takes the lowest sequence.
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: [resolution[0].rowID] + early.map(\.rowID)) {
            try RecordCoding.fields(of: $0.record!, encryption: nil)
        }
        #expect(sent.map { $0.mutation?.id?.sequence } == [1, 2, 3])
        let reopened = try ChangeQueueStore(path: path)
        #expect(try reopened.pending(account: "u1").map(\.recordID) == ["r", "u1", "u2", "u9"])
        // A resolution of u9's older change does not replace the newer one queued.
        #expect(try reopened.enqueue(account: "u1", saves: [Self.note("u9", "resolved")], deletions: [], keepingNewer: true).isEmpty)
        #expect(try reopened.pending(account: "u1").last?.record?["title"] == "d")
    }

    @Test("changes an atomic refusal left undecided go back unsent, to go one by one under new ids; one whose record has a newer change queued gives way to it")
    func undecidedGoBackAlone() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        _ = try store.pending(account: "u1")
        let rows = try store.enqueue(account: "u1", saves: [Self.note("n1", "a"), Self.note("n2", "b")], deletions: [])
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: rows.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(sent.map(\.alone) == [false, false])
        _ = try store.enqueue(account: "u1", saves: [Self.note("n2", "c")], deletions: [])
        let kept = try store.unprepare(account: "u1", rowIDs: sent.map(\.rowID))
        #expect(kept.map(\.recordID) == ["n1"] && kept[0].alone && !kept[0].isSent)
        let pending = try store.pending(account: "u1")
        #expect(pending.map { $0.record?["title"] } == ["a", "c"] && pending.allSatisfy { !$0.isSent })
        let again = try await store.prepare(account: "u1", records: Self.records, rowIDs: pending.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(again.map(\.alone) == [true, true], "a batch with one change to go alone goes one by one")
        #expect(again.map { $0.mutation?.id?.sequence } == [3, 4], "new ids, after the ones refused")
    }

    @Test("a conflicted change is settled and its resolution queued in one transaction: when queueing fails, the change is still there, sent, to meet the conflict again; when it succeeds, the resolution alone is queued")
    func conflictSettledWithItsResolution() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        let queued = try store.enqueue(account: "u1", saves: [Self.note("n1", "mine")], deletions: [])
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: queued.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        let resolution = Self.note("n1", "merged", version: 3)
        let conflict: [(rowID: Int64, settlement: ChangeQueueStore.Settlement)] = [(sent[0].rowID, .server(Version(3), #"{"_type":"Note","title":"theirs"}"#))]
        // Queueing the resolution fails (the file refuses new rows): nothing of the step is kept.
        try await store.queue.write { try $0.execute(sql: "CREATE TEMP TRIGGER refuse BEFORE INSERT ON pending BEGIN SELECT RAISE(ABORT, 'refused for the test'); END") }
        await #expect(throws: (any Error).self) {
            _ = try await store.settle(account: "u1", conflict, undecided: [], requeue: [resolution])
        }
        let after = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        #expect(try after.pending(account: "u1").map { [$0.recordID, $0.sequence.map(String.init) ?? "-"] } == [["n1", "1"]])
        try await store.queue.write { try $0.execute(sql: "DROP TRIGGER refuse") }
        let (again, requeued) = try await store.settle(account: "u1", conflict, undecided: [], requeue: [resolution])
        #expect(again.isEmpty && requeued.map(\.recordID) == ["n1"])
        let pending = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path).pending(account: "u1")
        #expect(pending.map { [$0.recordID, $0.sequence.map(String.init) ?? "-"] } == [["n1", "-"]])
        #expect(pending.first?.record?["title"] == "merged")
    }

    @Test("a record's stored text reads back as the record, stamps and sealed properties included, whatever its node's id holds")
    func recordText() throws {
        for node in ["phone-1", "a \"quoted\" \\ node", "née"] {
            var record = Self.note("n1", "a", version: 4, secret: "s")
            record.metadata.stamps = ["title": HLCTimestamp(wallMilliseconds: 1_764_000_000_000, counter: 3, node: node)]
            let text = RecordText.encode(record)
            #expect(RecordText.decode(text, id: "n1", version: Version(4)) == record, "\(text)")
        }
    }

    @Test("queuing changes and handing out sequences are flushed to disk before they return; settling answers and storing bases are not")
    func queuedChangesAreFlushed() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        func synchronous() throws -> Int? { try store.queue.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } }
        let rows = try store.enqueue(account: "u1", saves: [Self.note("n1", "a")], deletions: [])
        #expect(store.flushedCommits.load(ordering: .relaxed) == 1)
        // Only that commit: the connection is back to NORMAL for the next.
        #expect(try synchronous() == 1)
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: rows.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(store.flushedCommits.load(ordering: .relaxed) == 2)
        try await store.settle(account: "u1", [(sent[0].rowID, .sent(Version(3)))])
        try await store.storeBases(account: "u1", [("n2", Version(4), #"{"_type":"Note","title":"b"}"#)])
        #expect(store.flushedCommits.load(ordering: .relaxed) == 2)
        #expect(try synchronous() == 1)
        // A failed flushed write leaves nothing behind, and the connection NORMAL.
        let more = try store.enqueue(account: "u1", saves: [Self.note("n3", "c")], deletions: [])
        await #expect(throws: TandemError.self) {
            try await store.prepare(account: "u1", records: Self.records, rowIDs: more.map(\.rowID)) { _ in throw TandemError(.internal, "no") }
        }
        #expect(store.flushedCommits.load(ordering: .relaxed) == 3)
        #expect(try synchronous() == 1)
        #expect(try store.pending(account: "u1").map(\.isSent) == [false])
    }

    @Test("an answered save becomes the record's base as sent (sealed properties sealed), at the version answered; a deletion removes it; a refusal leaves it")
    func settledIntoBase() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try ChangeQueueStore(path: directory.url.appendingPathComponent("q.sqlite").path)
        let encryption = try RecordEncryption(keyID: "k1", key: SymmetricKey(size: .bits256))
        let rows = try store.enqueue(account: "u1", saves: [Self.note("n1", "a", secret: "s"), Self.note("n2", "b")], deletions: [("n3", "Note")])
        try await store.storeBases(account: "u1", [("n3", Version(2), #"{"_type":"Note","title":"gone"}"#), ("n2", Version(4), #"{"_type":"Note","title":"old"}"#)])
        #expect(try await store.baseTypes(account: "u1", ids: ["n3", "n9"]) == ["n3": "Note"])
        let sent = try await store.prepare(account: "u1", records: Self.records, rowIDs: rows.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: encryption) }
        #expect(sent[2].mutation?.kind == .delete)
        try await store.settle(account: "u1", [(sent[0].rowID, .sent(Version(7))), (sent[1].rowID, .unchanged), (sent[2].rowID, .gone)])
        #expect(try store.pending(account: "u1").isEmpty)
        let bases = try store.bases(account: "u1", ids: ["n1", "n2", "n3"], encryption: encryption)
        #expect(bases["n1"]?.metadata.version == Version(7))
        #expect(bases["n1"]?.properties["secret"] == .encryptedValue("s"))
        #expect(bases["n1"]?["title"] == "a")
        #expect(bases["n2"]?["title"] == "old")
        #expect(bases["n3"] == nil)
        // Stored sealed: without the key the base cannot be opened, and is left out.
        let stored = try await store.queue.read { try String.fetchOne($0, sql: "SELECT data FROM base WHERE record_id = 'n1'") }
        #expect(stored?.contains("\"s\"") == false)
        #expect(try store.bases(account: "u1", ids: ["n1"], encryption: nil).isEmpty)
    }

    @Test("a file written by the first schema opens: a sent change is sent again exactly as it went (same id, data and precondition), an unsent one as queued")
    func migratesFirstSchema() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("q.sqlite").path
        let sentMutation = Mutation(path: try Self.records.document("n1"), kind: .set(["_type": "Note", "title": "x"]),
                                    precondition: .version(Version(3)), id: MutationID(clientID: "w/changes", sequence: 7))
        let deletion = Mutation(path: try Self.records.document("n2"), kind: .delete, id: MutationID(clientID: "w/changes", sequence: 8))
        do {
            let queue = try DatabaseQueue(path: path)
            try ChangeQueueStore.migrator.migrate(queue, upTo: "v1")
            try await queue.write { db in
                // The first schema's own encoding of a record.
                let recordText = #"{"properties":{"title":{"value":"x"}},"stamps":{},"type":"Note","version":3}"#
                try db.execute(sql: "INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes, mutation) VALUES ('u1', 'n1', 'Note', 0, ?, 10, ?)",
                               arguments: [recordText, JSONText.encode(sentMutation.wireValue)])
                try db.execute(sql: "INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes, mutation) VALUES ('u1', 'n2', 'Note', 1, NULL, 10, ?)",
                               arguments: [JSONText.encode(deletion.wireValue)])
                try db.execute(sql: "INSERT INTO pending (account, record_id, record_type, is_deletion, record, bytes) VALUES ('u1', 'n1', 'Note', 0, ?, 10)",
                               arguments: [#"{"properties":{"title":{"value":"y"},"secret":{"encrypted":"s"}},"stamps":{"title":"5-0-d"},"type":"Note","version":3}"#])
                try db.execute(sql: "INSERT INTO base (account, record_id, record) VALUES ('u1', 'n1', ?)", arguments: [recordText])
                try db.execute(sql: "INSERT INTO meta (account, key, value) VALUES ('u1', 'writer', 'w/changes'), ('u1', 'next_sequence', '9')")
            }
        }
        let store = try ChangeQueueStore(path: path)
        let pending = try store.pending(account: "u1")
        #expect(pending.map(\.isSent) == [true, true, false])
        let encryption = try RecordEncryption(keyID: "k1", key: SymmetricKey(size: .bits256))
        let prepared = try await store.prepare(account: "u1", records: Self.records, rowIDs: pending.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: encryption) }
        #expect(prepared[0].mutation == sentMutation)
        #expect(prepared[1].mutation == deletion)
        #expect(prepared[2].mutation?.id == MutationID(clientID: "w/changes", sequence: 9))
        #expect(prepared[2].mutation?.precondition == .version(Version(3)))
        #expect(pending[2].record?.properties == ["title": .value("y"), "secret": .encryptedValue("s")])
        #expect(pending[2].record?.metadata.stamps == ["title": HLCTimestamp("5-0-d")!])
        #expect(try store.bases(account: "u1", ids: ["n1"], encryption: nil).isEmpty)
    }
}

extension ChangeQueueStoreTests {
    @Test("two sent changes of one record left undecided by an atomic refusal: the newer is kept, to be sent again, and the older gives way to it, in whichever order they are put back")
    func newerUndecidedKept() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.url.appendingPathComponent("q.sqlite").path
        let store = try ChangeQueueStore(path: path)
        let v4 = try store.enqueue(account: "bob", saves: [Self.note("r2", "v4")], deletions: [])
        _ = try store.prepare(account: "bob", records: Self.records, rowIDs: [v4[0].rowID]) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        let v6 = try store.enqueue(account: "bob", saves: [Self.note("r2", "v6")], deletions: [])
        let v7 = try store.enqueue(account: "bob", saves: [Self.note("r1", "v7")], deletions: [])
        let relaunched = try ChangeQueueStore(path: path)
        let pending = try relaunched.pending(account: "bob")
        #expect(pending.map(\.rowID) == [v4[0].rowID, v6[0].rowID, v7[0].rowID])
        // All three sent in one atomic request, which the server refused for another's sake.
        let sent = try relaunched.prepare(account: "bob", records: Self.records, rowIDs: pending.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(sent.map(\.sequence) == [1, 2, 3])
        let (kept, _) = try relaunched.settle(account: "bob", [], undecided: pending.map(\.rowID), requeue: [])
        #expect(kept.map(\.rowID) == [v6[0].rowID, v7[0].rowID], "the older change of r2 gave way")
        #expect(try relaunched.pending(account: "bob").map { $0.record?["title"] } == ["v6", "v7"])
        let again = try relaunched.prepare(account: "bob", records: Self.records, rowIDs: kept.map(\.rowID)) { try RecordCoding.fields(of: $0.record!, encryption: nil) }
        #expect(again.map { $0.record?["title"] } == ["v6", "v7"])
    }
}
