import Crypto
import Foundation
import GRDB
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The README's change-sync example, run as written on two devices, each with its own GRDB
/// database, against a real server: the README's block is read and each of its lines must be in
/// ``ReadmeChangeSyncExample`` or ``ReadmeChangeSyncTests/example(client:database:key:savedState:)``.
enum ReadmeChangeSyncExample {
    struct Note: Codable, FetchableRecord, PersistableRecord, SyncableRecord {
        var id: String
        var title: String
        var body: String
        var recordMetadata: RecordMetadata?           // stored with the row; nil until first synced

        var recordID: String { id }
        var recordProperties: [String: SyncableValue] { ["title": .value(.string(title)), "body": .encryptedValue(.string(body))] }

        init(id: String, title: String, body: String) { self.id = id; self.title = title; self.body = body }
        init(_ record: SyncedRecord) {
            self.init(id: record.id, title: record["title"]?.stringValue ?? "", body: record["body"]?.stringValue ?? "")
            recordMetadata = record.metadata
        }
    }

    final class NoteSync: ChangeSyncEngineDelegate {
        let database: DatabaseQueue
        init(database: DatabaseQueue) { self.database = database }

        func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {
            write { db in for record in records { try Note(record).save(db) } }
        }
        func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {
            write { db in for deletion in deletions { _ = try Note.deleteOne(db, key: deletion.recordID) } }
        }
        func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {
            write { db in for sent in records { try Note(sent.record).save(db) } }    // the new version
        }
        func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord? {
            var merged = conflict.server                                             // theirs…
            merged.properties["title"] = conflict.client.properties["title"]         // …with our title
            return merged
        }
        func write(_ change: (Database) throws -> Void) {
            do { try database.write(change) } catch { print("notes: \(error)") }    // your app's logging
        }
    }
}

@Suite("README change sync", .timeLimit(.minutes(1)))
struct ReadmeChangeSyncTests {
    typealias Note = ReadmeChangeSyncExample.Note
    typealias NoteSync = ReadmeChangeSyncExample.NoteSync
    let now = AuthenticationTests.WallClock()

    /// The README's example.
    func example(client: TandemClient, database: DatabaseQueue, key: SymmetricKey, savedState: ChangeSyncEngine.State?) async throws -> (ChangeSyncEngine, NoteSync) {
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")          // users/{uid}/zones/notes/records
        configuration.encryption = try RecordEncryption(keyID: "2026-11", key: key)   // a SymmetricKey(size: .bits256) of the user's
        let engine = try ChangeSyncEngine(client: client, configuration: configuration, state: savedState)
        let sync = NoteSync(database: database)
        engine.delegate = sync
        engine.start()                                  // makes the zone, subscribes, fetches what is new

        let note = Note(id: "n1", title: "Groceries", body: "eggs")
        try await database.write { db in try note.save(db) }
        try engine.sendChanges(modify: [note], delete: [])                             // on disk now; sent when online
        return (engine, sync)
    }

    /// A device's GRDB database with the notes table.
    func database(in directory: URL) throws -> DatabaseQueue {
        let database = try DatabaseQueue(path: directory.appendingPathComponent("app.sqlite").path)
        try database.write { db in
            try db.create(table: "note") { table in
                table.primaryKey("id", .text)
                table.column("title", .text).notNull()
                table.column("body", .text).notNull()
                table.column("recordMetadata", .text)
            }
        }
        return database
    }

    func note(_ database: DatabaseQueue, _ id: String) -> Note? {
        try? database.read { db in try Note.fetchOne(db, key: id) }
    }

    func until(_ engine: ChangeSyncEngine, _ condition: () -> Bool) async -> Bool {
        await engine.waitUntil(condition)
    }

    @Test("the README's change-sync example is the code here, and two devices with their own GRDB tables converge through it: one offline, both editing n1, conflicts resolved by the README's resolver")
    func readmeExample() async throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let section = try #require(readme.range(of: "## Change-token sync for your own store ("))
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let lines = readme[start.upperBound..<end.lowerBound].split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for line in lines where !line.isEmpty && !line.hasPrefix("import") && !line.hasPrefix("}") {
            #expect(source.contains(line), "the README's line is not in the test: \(line)")
        }

        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let key = SymmetricKey(size: .bits256)
        let phoneFiles = TemporaryDirectory()
        let laptopFiles = TemporaryDirectory()
        let phoneClient = RunningClient(server, id: "phone") { [phoneFiles] in
            $0.tokenProvider = ClientSignInTests.Provider(tokens, now: now).provide
            $0.storageDirectory = phoneFiles.url
        }
        let laptopClient = RunningClient(server, id: "laptop") { [laptopFiles] in
            $0.tokenProvider = ClientSignInTests.Provider(tokens, now: now).provide
            $0.storageDirectory = laptopFiles.url
        }
        for client in [phoneClient.client, laptopClient.client] {
            for await state in client.authStates() where state.uid == "ada" { break }
        }
        let phoneDatabase = try database(in: phoneFiles.url)
        let laptopDatabase = try database(in: laptopFiles.url)

        let (phone, phoneSync) = try await example(client: phoneClient.client, database: phoneDatabase, key: key, savedState: nil)
        #expect(await until(phone) { self.note(phoneDatabase, "n1")?.recordMetadata?.version.rawValue ?? 0 > 0 })

        // The laptop, offline, runs the same code: its n1 meets the phone's when it is back.
        laptopClient.client.setOnline(false)
        let (laptop, laptopSync) = try await example(client: laptopClient.client, database: laptopDatabase, key: key, savedState: nil)
        var edited = try #require(note(laptopDatabase, "n1"))
        edited.title = "Shopping"
        let shopping = edited
        try await laptopDatabase.write { db in try shopping.save(db) }
        try laptop.sendChanges(modify: [shopping], delete: [])

        // Meanwhile the phone changes the body.
        var changed = try #require(note(phoneDatabase, "n1"))
        changed.body = "eggs, milk"
        let milk = changed
        try await phoneDatabase.write { db in try milk.save(db) }
        try phone.sendChanges(modify: [milk], delete: [])
        #expect(await until(phone) { phone.pendingCount == 0 && self.note(phoneDatabase, "n1")?.body == "eggs, milk" })

        laptopClient.client.setOnline(true)
        // Theirs (the phone's body), with the laptop's title: on both devices, at one version.
        #expect(await until(laptop) { self.note(laptopDatabase, "n1")?.title == "Shopping" && self.note(laptopDatabase, "n1")?.body == "eggs, milk" && laptop.pendingCount == 0 })
        #expect(await until(phone) { self.note(phoneDatabase, "n1")?.title == "Shopping" })
        let onPhone = try #require(note(phoneDatabase, "n1"))
        let onLaptop = try #require(note(laptopDatabase, "n1"))
        #expect(onPhone.title == onLaptop.title && onPhone.body == onLaptop.body)
        #expect(onPhone.recordMetadata?.version == onLaptop.recordMetadata?.version)
        withExtendedLifetime((phoneSync, laptopSync)) {}
        await phoneClient.stop()
        await laptopClient.stop()
        await server.stop()
    }
}
