import Crypto
import Foundation
import GRDB
import Tandem
import TandemCore

/// The code of the article "Migrating from TakeoffKit" (MigratingFromTakeoffKit.md).
enum MigratingFromTakeoffKitSnippets {
    // snippet: takeoff-model
    struct Folder: Codable, FetchableRecord, PersistableRecord, SyncableRecord {
        var id: String
        var index: Int
        var name: String
        var recordMetadata: RecordMetadata?        // stored with the row; nil until first synced

        var recordID: String { id }
        var recordProperties: [String: SyncableValue] {
            ["index": .value(.int(index)), "name": .encryptedValue(.string(name))]
        }

        init(id: String, index: Int, name: String) { self.id = id; self.index = index; self.name = name }
        init(_ record: SyncedRecord) {
            self.init(id: record.id, index: record["index"]?.intValue ?? 0, name: record["name"]?.stringValue ?? "")
            recordMetadata = record.metadata
        }
    }
    // end snippet

    // snippet: takeoff-delegate
    final class FolderSync: ChangeSyncEngineDelegate {
        let database: DatabaseQueue
        init(database: DatabaseQueue) { self.database = database }

        func syncEngine(_ engine: ChangeSyncEngine, didStopWithError error: any Error) {
            print("sync halted: \(error)")                                     // start() resumes it
        }
        func syncEngine(_ engine: ChangeSyncEngine, didFetchModifications records: [SyncedRecord]) {
            write { db in for record in records { try Folder(record).save(db) } }
        }
        func syncEngine(_ engine: ChangeSyncEngine, didFetchDeletions deletions: [RecordDeletion]) {
            write { db in for deletion in deletions { _ = try Folder.deleteOne(db, key: deletion.recordID) } }
        }
        func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {
            write { db in for sent in records { try Folder(sent.record).save(db) } }    // the new version
        }
        func syncEngine(_ engine: ChangeSyncEngine, sendDidFailFor failures: [FailedRecord], batch: Int) {
            for failure in failures { print("not saved: \(failure.recordID): \(failure.error)") }
        }
        func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord? {
            var merged = conflict.server                                        // theirs…
            merged.properties["name"] = conflict.client.properties["name"]      // …with our name
            return merged
        }
        func write(_ change: (Database) throws -> Void) {
            do { try database.write(change) } catch { print("folders: \(error)") }
        }
    }
    // end snippet

    static func run(client: TandemClient, database: DatabaseQueue, key: SymmetricKey, savedState: ChangeSyncEngine.State?) async throws {
        // snippet: takeoff-after
        var configuration = ChangeSyncEngine.Configuration(zoneName: "MyDataZone")
        configuration.encryption = try RecordEncryption(keyID: "2026-11", key: key)
        let engine = try ChangeSyncEngine(client: client, configuration: configuration, state: savedState)
        let sync = FolderSync(database: database)                  // held: the engine holds its delegate weakly
        engine.delegate = sync
        engine.start()

        let folder = Folder(id: "f1", index: 0, name: "Receipts")
        try await database.write { db in try folder.save(db) }
        try engine.sendChanges(modify: [folder], delete: [])       // on disk when this returns
        engine.fetchChanges(token: engine.state.token)
        // end snippet
        _ = sync
    }

    static func watch(engine: ChangeSyncEngine) async {
        // snippet: takeoff-events
        for await event in engine.events() {
            switch event {
            case .sent(let results): print("batch \(results.batch): \(results.saved.count) saved")
            case .conflictResolved(let conflict, _): print("conflict on \(conflict.client.id)")
            case .stopped(let error): print("halted: \(error)")
            default: break
            }
        }
        // end snippet
    }
}
