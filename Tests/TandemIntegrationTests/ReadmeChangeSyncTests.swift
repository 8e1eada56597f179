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
            guard conflict.client.type == Note.recordType else { return engine.configuration.resolver.resolve(conflict) }
            var merged = conflict.server                                             // theirs…
            merged.properties["title"] = conflict.client.properties["title"]         // …with our title
            return merged
        }
        func write(_ change: (Database) throws -> Void) {
            do { try database.write(change) } catch { print("notes: \(error)") }    // your app's logging
        }
    }
}

@Suite("README change sync", .timeLimit(.minutes(5)))
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

    /// The README's store without its resolver: conflicts go to the engine's, the HLC's.
    final class StampedNoteSync: ChangeSyncEngineDelegate {
        let notes: NoteSync
        init(database: DatabaseQueue) { notes = NoteSync(database: database) }

        func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {
            notes.syncEngine(engine, didFetchModifications: records)
        }
        func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {
            notes.syncEngine(engine, didFetchDeletions: deletions)
        }
        func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {
            notes.syncEngine(engine, didSendModifications: records, batch: batch)
        }
    }

    @Test("two devices with their own GRDB tables, their clocks ten minutes apart each way, both offline for a while and editing the same notes: the HLC resolver merges each conflict field by field, and both tables end the same")
    func skewedDevicesConverge() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let key = SymmetricKey(size: .bits256)
        var devices: [(client: RunningClient, engine: ChangeSyncEngine, database: DatabaseQueue, sync: StampedNoteSync, files: TemporaryDirectory)] = []
        for (name, skew) in [("phone", Int64(600_000)), ("laptop", Int64(-600_000))] {
            let files = TemporaryDirectory()
            let client = RunningClient(server, id: name) { [files] in
                $0.tokenProvider = ClientSignInTests.Provider(tokens, now: now).provide
                $0.storageDirectory = files.url
            }
            for await state in client.client.authStates() where state.uid == "ada" { break }
            var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
            configuration.encryption = try RecordEncryption(keyID: "2026-11", key: key)
            configuration.wallClock = { Int64(Date().timeIntervalSince1970 * 1_000) + skew }
            let engine = try ChangeSyncEngine(client: client.client, configuration: configuration)
            let database = try database(in: files.url)
            let sync = StampedNoteSync(database: database)
            engine.delegate = sync
            engine.start()
            devices.append((client, engine, database, sync, files))
        }
        let (phone, laptop) = (devices[0], devices[1])
        // Three notes from the phone, on both devices.
        let notes = (1...3).map { Note(id: "n\($0)", title: "title \($0)", body: "body \($0)") }
        try await phone.database.write { db in for note in notes { try note.save(db) } }
        try phone.engine.sendChanges(modify: notes, delete: [])
        #expect(await phone.engine.waitUntil { (1...3).allSatisfy { self.note(phone.database, "n\($0)")?.recordMetadata?.version.rawValue ?? 0 > 0 } })
        #expect(await laptop.engine.waitUntil { (1...3).allSatisfy { self.note(laptop.database, "n\($0)") != nil } })

        // Both offline; the phone edits titles, the laptop bodies (and n3's title too).
        phone.client.client.setOnline(false)
        laptop.client.client.setOnline(false)
        var phoneEdits: [Note] = []
        var laptopEdits: [Note] = []
        for index in 1...3 {
            var mine = try #require(note(phone.database, "n\(index)"))
            mine.title = "phone title \(index)"
            phoneEdits.append(mine)
            var theirs = try #require(note(laptop.database, "n\(index)"))
            theirs.body = "laptop body \(index)"
            if index == 3 { theirs.title = "laptop title 3" }
            laptopEdits.append(theirs)
        }
        try await phone.database.write { [phoneEdits] db in for note in phoneEdits { try note.save(db) } }
        try await laptop.database.write { [laptopEdits] db in for note in laptopEdits { try note.save(db) } }
        try phone.engine.sendChanges(modify: phoneEdits, delete: [])
        try laptop.engine.sendChanges(modify: laptopEdits, delete: [])
        phone.client.client.setOnline(true)
        #expect(await phone.engine.waitUntil { phone.engine.pendingCount == 0 && self.note(phone.database, "n1")?.title == "phone title 1" })
        laptop.client.client.setOnline(true)

        // Each field from the device that changed it. Both changed n3's title: their stamps decide,
        // and both devices decide alike, whatever their wall clocks say.
        for device in [laptop, phone] {
            #expect(await device.engine.waitUntil {
                device.engine.pendingCount == 0 && (1...3).allSatisfy { self.note(device.database, "n\($0)")?.body == "laptop body \($0)" }
            })
        }
        #expect(await phone.engine.waitUntil { self.note(phone.database, "n3")?.title == self.note(laptop.database, "n3")?.title })
        for index in 1...3 {
            let onPhone = try #require(note(phone.database, "n\(index)"))
            let onLaptop = try #require(note(laptop.database, "n\(index)"))
            #expect(onPhone.title == onLaptop.title && onPhone.body == onLaptop.body, "n\(index): \(onPhone) vs \(onLaptop)")
            #expect(onPhone.recordMetadata?.version == onLaptop.recordMetadata?.version)
            if index < 3 { #expect(onPhone.title == "phone title \(index)") }
        }
        for device in devices { await device.client.stop() }
        await server.stop()
    }

    /// The README's awaited send.
    func awaitedSend(engine: ChangeSyncEngine, database: DatabaseQueue, note: Note) async throws -> [SendOutcome] {
        let results = try await engine.send(modify: [note], delete: [])               // once the server answered each
        for case .saved(let sent) in results { try await database.write { db in try Note(sent.record).save(db) } }
        return results
    }

    @Test("the README's awaited send is the code here: it returns once the server answered, and the note it saves carries the server's version")
    func readmeAwaitedSend() async throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let section = try #require(readme.range(of: "To wait for the server instead, `send`"))
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let lines = readme[start.upperBound..<end.lowerBound].split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(!lines.isEmpty)
        for line in lines where !line.isEmpty {
            #expect(source.contains(line), "the README's line is not in the test: \(line)")
        }

        let server = try await MockServer.signedIn(as: "ada")
        let files = TemporaryDirectory()
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.directory = files.url
        configuration.encryption = try RecordEncryption(keyID: "2026-11", key: SymmetricKey(size: .bits256))
        let engine = try ChangeSyncEngine(client: server.client, configuration: configuration)
        engine.start()
        let database = try database(in: files.url)
        let results = try await awaitedSend(engine: engine, database: database, note: Note(id: "n1", title: "Groceries", body: "eggs"))
        #expect(results.map(\.recordID) == ["n1"])
        let saved = try #require(note(database, "n1"))
        #expect(saved.recordMetadata?.version == server.documents[try DocumentPath("users/ada/zones/notes/records/n1")]?.version)
        #expect(saved.body == "eggs")
    }
}
