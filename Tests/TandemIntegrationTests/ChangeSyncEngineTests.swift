import Crypto
import Foundation
import Synchronization
import Testing
@testable import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The change-sync engine end to end, on the real server with signed-in users: devices that each
/// keep their own records converge through it.
@Suite("Change sync engine", .timeLimit(.minutes(5)))
struct ChangeSyncEngineTests {
    let now = AuthenticationTests.WallClock()
    static let key = SymmetricKey(size: .bits256)

    /// An app's own store of records, kept by the engine's callbacks.
    final class Notebook: ChangeSyncEngineDelegate {
        let records = Mutex<[String: SyncedRecord]>([:])
        let tokens = Mutex<[ChangeToken?]>([])
        let fetchFailures = Mutex<[FailedRecord]>([])
        let sendFailures = Mutex<[FailedRecord]>([])
        /// The ids of the records told sent, in order.
        let sent = Mutex<[String]>([])
        let accounts = Mutex<[String?]>([])
        /// The size of each list of fetched modifications, in order.
        let fetchedSizes = Mutex<[Int]>([])

        func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int) {
            sendFailures.withLock { $0 += failures }
        }

        func syncEngine(_ engine: ChangeSyncEngine, fetchDidFailFor failures: [FailedRecord]) {
            fetchFailures.withLock { $0 += failures }
        }

        func syncEngine(_ engine: ChangeSyncEngine, didChangeAccount account: String?) {
            accounts.withLock { $0.append(account) }
        }

        func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {
            fetchedSizes.withLock { $0.append(records.count) }
            self.records.withLock { stored in for record in records { stored[record.id] = record } }
        }

        func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {
            records.withLock { stored in for deletion in deletions { stored.removeValue(forKey: deletion.recordID) } }
        }

        func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {
            self.records.withLock { stored in for sent in records { stored[sent.record.id] = sent.record } }
            sent.withLock { $0 += records.map(\.record.id) }
        }

        func syncEngine(_ engine: ChangeSyncEngine, didUpdateChangeToken token: ChangeToken?) {
            tokens.withLock { $0.append(token) }
        }

        subscript(id: String) -> SyncedRecord? { records.withLock { $0[id] } }

        /// Changes a record in the store, as the app would, and returns it to send.
        func edit(_ id: String, _ change: (inout SyncedRecord) -> Void) -> SyncedRecord {
            records.withLock { stored in
                var record = stored[id] ?? SyncedRecord(id: id, type: "Note", properties: [:], metadata: RecordMetadata(version: Version(0)))
                change(&record)
                stored[id] = record
                return record
            }
        }
    }

    /// A device: its client, signed in through `provider`, its engine and its store.
    struct Device {
        let running: RunningClient
        let engine: ChangeSyncEngine
        let notebook: Notebook
        let directory: TemporaryDirectory

        init(_ server: LiveServer, _ provider: ClientSignInTests.Provider, id: String, skew: Int64 = 0, resolver: ConflictResolver = .fieldLevelLastWriterWins,
             encryption: RecordEncryption? = try? RecordEncryption(keyID: "k1", key: ChangeSyncEngineTests.key), maxRecordsPerBatch: Int = 400,
             fetchPageSize: Int = 1_000) throws {
            directory = TemporaryDirectory()
            running = RunningClient(server, id: id) { [directory] in
                $0.tokenProvider = provider.provide
                $0.storageDirectory = directory.url
            }
            var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
            configuration.encryption = encryption
            configuration.wallClock = { Int64(Date().timeIntervalSince1970 * 1_000) + skew }
            configuration.resolver = resolver
            configuration.maxRecordsPerBatch = maxRecordsPerBatch
            configuration.fetchPageSize = fetchPageSize
            engine = try ChangeSyncEngine(client: running.client, configuration: configuration)
            notebook = Notebook()
            engine.delegate = notebook
        }

        /// Waits until `condition` holds, checking it after each of the engine's events and status changes.
        func until(_ condition: () -> Bool) async -> Bool {
            await engine.waitUntil(condition)
        }

        /// Sends records from the notebook.
        func send(_ records: [SyncedRecord], delete: [String] = []) throws {
            try engine.sendChanges(modify: records, delete: delete.map { RecordDeletion(recordID: $0, recordType: "Note") })
        }
    }

    func signedIn(_ client: TandemClient, as uid: String) async {
        for await state in client.authStates() where state.uid == uid { return }
    }

    @Test("two devices of one user: records one sends reach the other (sealed properties opened with the shared key); the server holds ciphertext only; deletions reach it too")
    func twoDevices() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        let laptop = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "laptop")
        await signedIn(phone.running.client, as: "ada")
        await signedIn(laptop.running.client, as: "ada")
        phone.engine.start()
        laptop.engine.start()
        let groceries = phone.notebook.edit("n1") {
            $0.properties = ["title": .value("Groceries"), "body": .encryptedValue("eggs and a secret cheese")]
        }
        let plans = phone.notebook.edit("n2") { $0.properties = ["title": .value("Plans")] }
        try phone.send([groceries, plans])
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n1"]?.metadata.version.rawValue ?? 0 > 0 })
        #expect(await laptop.until { laptop.notebook["n1"] != nil && laptop.notebook["n2"] != nil })
        #expect(laptop.notebook["n1"]?["body"] == "eggs and a secret cheese" && laptop.notebook["n1"]?.properties["body"]?.isEncrypted == true)
        #expect(laptop.notebook["n1"]?.metadata.version == phone.notebook["n1"]?.metadata.version)

        // The server's files hold the sealed body, never its text.
        let stored = try await server.store.document(at: documentPath("users/ada/zones/notes/records/n1"))
        #expect(stored?.data["title"] == "Groceries" && stored?.data["body"] == nil && stored?.data["_sealed"] != nil)
        var bytes = Data()
        for file in try FileManager.default.contentsOfDirectory(at: server.directory, includingPropertiesForKeys: nil) {
            bytes.append((try? Data(contentsOf: file)) ?? Data())
        }
        #expect(bytes.range(of: Data("Groceries".utf8)) != nil, "the files were read")
        #expect(bytes.range(of: Data("secret cheese".utf8)) == nil, "no plaintext of a sealed property on the server")

        try laptop.send([], delete: ["n2"])
        #expect(await phone.until { phone.notebook["n2"] == nil })
        #expect(phone.notebook["n1"] != nil)
        await phone.running.stop()
        await laptop.running.stop()
        await server.stop()
    }

    @Test("a batch size below one is taken as one: records are sent and fetched one at a time, never stalling or trapping")
    func batchSizeBelowOne() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone", maxRecordsPerBatch: 0)
        let laptop = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "laptop", maxRecordsPerBatch: -3)
        await signedIn(phone.running.client, as: "ada")
        await signedIn(laptop.running.client, as: "ada")
        phone.engine.start()
        laptop.engine.start()
        let notes = (1...3).map { n in phone.notebook.edit("n\(n)") { $0.properties = ["title": .value(.string("Note \(n)"))] } }
        try phone.send(notes)
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        #expect(await laptop.until { (1...3).allSatisfy { laptop.notebook["n\($0)"] != nil } })
        #expect(laptop.notebook.fetchedSizes.withLock { $0 }.allSatisfy { $0 == 1 })
        await phone.running.stop()
        await laptop.running.stop()
        await server.stop()
    }

    @Test("a new device on a server that pruned a deletion gets every record, page by page: its fetch from the beginning is served, its token never reset")
    func newDeviceAfterPruning() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        await signedIn(phone.running.client, as: "ada")
        phone.engine.start()
        try phone.send((1...4).map { n in phone.notebook.edit("n\(n)") { $0.properties = ["title": .value(.string("Note \(n)"))] } })
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        try phone.send([], delete: ["n1"])
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        try phone.send((5...6).map { n in phone.notebook.edit("n\(n)") { $0.properties = ["title": .value(.string("Note \(n)"))] } })
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        #expect(try await server.store.pruneTombstones(olderThan: Date().addingTimeInterval(3600)) == 1, "n1's tombstone pruned")

        // Two records a page, the read continuing from the beginning past the pruned deletion.
        let tablet = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "tablet", fetchPageSize: 2)
        await signedIn(tablet.running.client, as: "ada")
        tablet.engine.start()
        let ids = (2...6).map { "n\($0)" }
        // A reset token (the old loop) or a halt ends the wait too: the expectations below say which.
        _ = await tablet.until {
            ids.allSatisfy { tablet.notebook[$0] != nil } || tablet.notebook.tokens.withLock { $0.contains(nil) } || tablet.engine.status.isHalted
        }
        #expect(ids.allSatisfy { tablet.notebook[$0] != nil }, "the records that exist reached the new device")
        #expect(tablet.notebook["n1"] == nil)
        #expect(!tablet.notebook.tokens.withLock { $0.contains(nil) }, "the new device's token was reset: its fetch from the beginning was refused")
        #expect(!tablet.engine.status.isHalted, "the new device halted: \(String(describing: tablet.engine.lastError))")
        await phone.running.stop()
        await tablet.running.stop()
        await server.stop()
    }

    @Test("a device whose token the server no longer keeps changes for reads everything again, and is told the deletions whose tombstones were pruned")
    func existingDeviceAfterPruning() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        let laptop = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "laptop", fetchPageSize: 2)
        await signedIn(phone.running.client, as: "ada")
        await signedIn(laptop.running.client, as: "ada")
        phone.engine.start()
        laptop.engine.start()
        try phone.send((1...4).map { n in phone.notebook.edit("n\(n)") { $0.properties = ["title": .value(.string("Note \(n)"))] } })
        #expect(await laptop.until { (1...4).allSatisfy { laptop.notebook["n\($0)"] != nil } })
        // The laptop is away while n1 and n2 are deleted and their tombstones pruned.
        laptop.engine.stop()
        try phone.send([], delete: ["n1", "n2"])
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        try phone.send((5...6).map { n in phone.notebook.edit("n\(n)") { $0.properties = ["title": .value(.string("Note \(n)"))] } })
        #expect(await phone.until { phone.engine.pendingCount == 0 })
        #expect(try await server.store.pruneTombstones(olderThan: Date().addingTimeInterval(3600)) >= 1, "the tombstones pruned")

        laptop.engine.start()
        _ = await laptop.until {
            (laptop.notebook["n1"] == nil && laptop.notebook["n2"] == nil && laptop.notebook["n6"] != nil) || laptop.engine.status.isHalted
        }
        #expect(laptop.notebook["n1"] == nil && laptop.notebook["n2"] == nil, "the deletions whose tombstones were pruned were not told")
        #expect((3...6).allSatisfy { laptop.notebook["n\($0)"] != nil }, "the records that exist")
        #expect(laptop.notebook.tokens.withLock { $0.contains(nil) }, "the laptop's token was reset once")
        #expect(!laptop.engine.status.isHalted, "the laptop halted: \(String(describing: laptop.engine.lastError))")
        await phone.running.stop()
        await laptop.running.stop()
        await server.stop()
    }

    @Test("concurrent edits of one record on two devices, one stopped meanwhile, under ten minutes of clock skew each way: the conflict (met in a batch beside a new record) is resolved field by field, and both devices end with the same record")
    func conflictConverges() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone", skew: 600_000)
        let laptop = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "laptop", skew: -600_000)
        await signedIn(phone.running.client, as: "ada")
        await signedIn(laptop.running.client, as: "ada")
        phone.engine.start()
        laptop.engine.start()
        try phone.send([phone.notebook.edit("n1") { $0.properties = ["title": .value("Draft"), "body": .encryptedValue("first")] }])
        // The phone's store has the version the server gave (as an app edits what its store holds).
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n1"]?.metadata.version.rawValue ?? 0 > 0 })
        #expect(await laptop.until { laptop.notebook["n1"]?["title"] == "Draft" })

        // The laptop stops; both edit n1, each another property.
        laptop.engine.stop()
        try phone.send([phone.notebook.edit("n1") { $0.properties["title"] = .value("Final title") }])
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n1"]?.metadata.version.rawValue ?? 0 > 1 })
        // In one batch beside a new record: the refusal of n1 carries the server's record.
        try laptop.send([laptop.notebook.edit("n1") { $0.properties["body"] = .encryptedValue("second, from the laptop") },
                         laptop.notebook.edit("n9") { $0.properties = ["title": .value("New on the laptop")] }])
        laptop.engine.start()
        // The laptop's change meets the phone's: merged, sent on top of it, and fetched by both.
        #expect(await laptop.until { laptop.notebook["n1"]?["title"] == "Final title" && laptop.notebook["n1"]?["body"] == "second, from the laptop" && laptop.engine.pendingCount == 0 })
        #expect(await phone.until { phone.notebook["n1"]?["body"] == "second, from the laptop" })
        #expect(phone.notebook["n1"]?.properties == laptop.notebook["n1"]?.properties)
        #expect(await phone.until { phone.notebook["n9"]?["title"] == "New on the laptop" })
        #expect(phone.notebook["n1"]?.metadata.version == laptop.notebook["n1"]?.metadata.version)
        // The batch went as one atomic write, refused whole for n1's sake: n9 was sent again on its
        // own and saved once, and nothing was reported failed.
        #expect(laptop.notebook.sent.withLock { $0.filter { $0 == "n9" }.count } == 1)
        #expect(laptop.notebook.sendFailures.withLock { $0.isEmpty })
        await phone.running.stop()
        await laptop.running.stop()
        await server.stop()
    }

    @Test("a device with another key under the same id, or with none, is told of each sealed record it could not open, by a typed error naming it, and gets the rest; its status stream starts with the status now")
    func wrongKey() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        await signedIn(phone.running.client, as: "ada")
        phone.engine.start()
        try phone.send([phone.notebook.edit("n1") { $0.properties = ["title": .value("Diary"), "body": .encryptedValue("dear diary")] },
                        phone.notebook.edit("n2") { $0.properties = ["title": .value("Plain")] }])
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n2"]?.metadata.version.rawValue ?? 0 > 0 })

        for (name, encryption) in [("impostor", try RecordEncryption(keyID: "k1", key: SymmetricKey(size: .bits256))), ("keyless", nil)] {
            let other = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: name, encryption: encryption)
            await signedIn(other.running.client, as: "ada")
            var states = other.engine.states().makeAsyncIterator()
            let first = await states.next()
            #expect(first != nil && first?.isRunning == false && first?.pendingCount == 0, "the status now, before anything changes")
            other.engine.start()
            #expect(await other.until { other.notebook["n2"] != nil && !other.notebook.fetchFailures.withLock { $0.isEmpty } })
            let failure = try #require(other.notebook.fetchFailures.withLock { $0.first })
            let expected: RecordEncryptionError.Reason = encryption == nil ? .noEncryption : .cannotOpen("k1")
            #expect(failure.recordID == "n1" && (failure.error as? RecordEncryptionError) == RecordEncryptionError(recordID: "n1", property: "body", reason: expected))
            #expect(other.notebook["n1"] == nil, "nothing half-read")
            await other.running.stop()
        }
        await phone.running.stop()
        await server.stop()
    }

    @Test("a queued change whose stored state cannot be read halts the engine with data-loss; it is never sent as anything else (a deletion least of all)")
    func unreadableQueuedChange() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        await signedIn(phone.running.client, as: "ada")
        phone.engine.start()
        try phone.send([phone.notebook.edit("n1") { $0.properties = ["title": .value("Kept")] }])
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n1"]?.metadata.version.rawValue ?? 0 > 0 })
        // Stopped, an edit is queued (not yet sent); the file's copy of it is then damaged, and the
        // app relaunched.
        phone.engine.stop()
        try phone.send([phone.notebook.edit("n1") { $0.properties["title"] = .value("Edited") }])
        try await phone.engine.store.queue.write { db in try db.execute(sql: "UPDATE pending SET record = 'not a record'") }
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.encryption = try RecordEncryption(keyID: "k1", key: Self.key)
        let relaunched = try ChangeSyncEngine(client: phone.running.client, configuration: configuration, state: phone.engine.state)
        relaunched.start()
        #expect(await relaunched.waitUntil { relaunched.status.isHalted })
        #expect((relaunched.lastError as? TandemError)?.code == .dataLoss)
        #expect(try await server.store.document(at: documentPath("users/ada/zones/notes/records/n1"))?.data["title"] == "Kept")
        #expect(try relaunched.store.pending(account: "ada").count == 1, "still queued")
        await phone.running.stop()
        await server.stop()
    }

    @Test("a record sent again before its last send is answered: only the properties changed since the queued state get new stamps")
    func stampsAgainstTheQueuedState() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let phone = try Device(server, ClientSignInTests.Provider(tokens, now: now), id: "phone")
        await signedIn(phone.running.client, as: "ada")
        phone.engine.stop()
        try phone.send([phone.notebook.edit("n1") { $0.properties = ["title": .value("Draft"), "body": .encryptedValue("first")] }])
        try phone.send([phone.notebook.edit("n1") { $0.properties["title"] = .value("Final") }])
        let queued = try phone.engine.store.pending(account: "ada").compactMap(\.record)
        #expect(queued.count == 1, "not sent yet: the newer state replaced the older in the queue")
        let first = try #require(queued.first)
        #expect(first["title"] == "Final")
        phone.engine.start()
        #expect(await phone.until { phone.engine.pendingCount == 0 && phone.notebook["n1"]?.metadata.version.rawValue ?? 0 > 0 })
        // Sent once, then edited again before that send's answer: the body keeps its stamp.
        let sent = try #require(phone.notebook["n1"])
        phone.engine.stop()
        try phone.send([phone.notebook.edit("n1") { $0.properties["title"] = .value("Final, again") }])
        try phone.send([phone.notebook.edit("n1") { $0.properties["title"] = .value("Final, once more") }])
        let again = try #require(try phone.engine.store.pending(account: "ada").compactMap(\.record).last)
        #expect(again.metadata.stamps["body"] == sent.metadata.stamps["body"], "the body did not change")
        #expect(again.metadata.stamps["title"] != sent.metadata.stamps["title"])
        await phone.running.stop()
        await server.stop()
    }

    /// A server, its sign-in provider and one device, with Ada signed in, her engine started and
    /// her first record, a1, on the server.
    func adaOnSharedDevice() async throws -> (LiveServer, ClientSignInTests.Provider, Device) {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let provider = ClientSignInTests.Provider(tokens, now: now)
        let device = try Device(server, provider, id: "shared")
        await signedIn(device.running.client, as: "ada")
        device.engine.start()
        try device.send([device.notebook.edit("a1") { $0.properties = ["title": .value("Ada's")] }])
        #expect(await device.until { device.engine.pendingCount == 0 && device.notebook["a1"]?.metadata.version.rawValue ?? 0 > 0 })
        return (server, provider, device)
    }

    /// Signs `uid` in on `device`: its connection is made again with the new user's token.
    func signIn(_ device: Device, _ provider: ClientSignInTests.Provider, as uid: String) async {
        provider.user.withLock { $0 = uid }
        device.running.client.setOnline(false)
        device.running.client.setOnline(true)
        await signedIn(device.running.client, as: uid)
    }

    @Test("a change queued while the user switches stays the first user's: never sent into the second user's zone under their writer, and sent as the first user's once they are back")
    func switchWhileQueueing() async throws {
        let (server, provider, device) = try await adaOnSharedDevice()

        // Ada's change is in the file, and not yet handed to the engine's machine, when Bob signs
        // in: the client is Bob's before the step that queues it ends.
        let bobsBook = Notebook()
        device.engine.delegate = bobsBook
        device.engine.afterQueueing.withLock {
            $0 = QueueingHook {
                let bob = DispatchSemaphore(value: 0)
                let client = device.running.client
                let watch = Task {
                    for await state in client.authStates() where state.uid == "bob" { break }
                    bob.signal()
                }
                provider.user.withLock { $0 = "bob" }
                client.setOnline(false)
                client.setOnline(true)
                bob.wait()
                watch.cancel()
            }
        }
        let change = device.notebook.edit("a3") { $0.properties = ["title": .value("Ada's, queued as Bob came")] }
        try device.send([change])
        device.engine.afterQueueing.withLock { $0 = nil }
        #expect(await device.until { device.engine.status.account == "bob" && device.engine.pendingCount == 0 && device.engine.token != nil })
        // Bob's own change goes; Ada's does not go with it, or after it.
        try device.engine.sendChanges(modify: [SyncedRecord(id: "b1", type: "Note", properties: ["title": .value("Bob's")], metadata: RecordMetadata(version: Version(0)))], delete: [])
        #expect(await device.until { device.engine.pendingCount == 0 && bobsBook["b1"] != nil })
        #expect(try await server.store.document(at: documentPath("users/bob/zones/notes/records/a3")) == nil)
        #expect(try await server.store.document(at: documentPath("users/ada/zones/notes/records/a3")) == nil, "not sent while Bob is signed in")
        #expect(bobsBook["a3"] == nil)

        // Ada again: her change lands in her zone.
        device.engine.delegate = device.notebook
        await signIn(device, provider, as: "ada")
        #expect(await device.until { device.engine.status.account == "ada" && device.engine.pendingCount == 0 })
        #expect(try await server.store.document(at: documentPath("users/ada/zones/notes/records/a3"))?.data["title"] == "Ada's, queued as Bob came")
        await device.running.stop()
        await server.stop()
    }

    @Test("a user switch: the second user's engine sees none of the first user's records, and the first user's change queued offline is never sent as the second")
    func userSwitch() async throws {
        let (server, provider, device) = try await adaOnSharedDevice()
        device.running.client.setOnline(false)
        try device.send([device.notebook.edit("a2") { $0.properties = ["title": .value("Ada's, offline")] }])
        #expect(device.engine.pendingCount == 1)

        provider.user.withLock { $0 = "bob" }
        let bobsBook = Notebook()
        device.engine.delegate = bobsBook
        device.running.client.setOnline(true)
        await signedIn(device.running.client, as: "bob")
        #expect(await device.until { device.engine.status.account == "bob" && device.engine.pendingCount == 0 && device.engine.token != nil })
        #expect(bobsBook.records.withLock { $0.isEmpty }, "Bob fetched none of Ada's records")
        #expect(bobsBook.accounts.withLock { $0 } == ["bob"])
        try device.engine.sendChanges(modify: [SyncedRecord(id: "b1", type: "Note", properties: ["title": .value("Bob's")], metadata: RecordMetadata(version: Version(0)))], delete: [])
        #expect(await device.until { device.engine.pendingCount == 0 && bobsBook["b1"] != nil })
        #expect(try await server.store.document(at: documentPath("users/bob/zones/notes/records/a2")) == nil)
        #expect(try await server.store.document(at: documentPath("users/ada/zones/notes/records/a2")) == nil, "not sent while Bob is signed in")

        // Ada again: her queued change lands.
        device.engine.delegate = device.notebook
        await signIn(device, provider, as: "ada")
        #expect(await device.until { device.engine.status.account == "ada" && device.engine.pendingCount == 0 })
        #expect(try await server.store.document(at: documentPath("users/ada/zones/notes/records/a2"))?.data["title"] == "Ada's, offline")
        await device.running.stop()
        await server.stop()
    }
}
