// Writes through a CollectionSyncEngine with local persistence while its server is offline, and
// prints "returned N" after each write call returns, so the test that kills it with SIGKILL
// knows which writes were promised.
//
// Usage: CrashWriter DIRECTORY FIRST COUNT
import Foundation
import Synchronization
import Tandem
import TandemCore
import TandemTesting

struct Counter: SyncModel {
    var id: String
    var n: Int
}

/// An element of synced state, for `CrashWriter synced DIRECTORY`.
struct Chore: DocumentIdentifiable {
    var clientId = UUID()
    var documentId: String?
    var title: String
    var done = false
}

let arguments = CommandLine.arguments
if arguments.count == 3, arguments[1] == "synced" {
    // Edits a SyncedCollection offline, one at a time; after each edit is on disk (`save()`),
    // prints "saved ID TITLE", so the test that kills it knows which edits were promised. Every
    // second edit changes the element made before it, so the outbox holds creates and merges.
    let directory = URL(fileURLWithPath: arguments[2], isDirectory: true)
    let remote = MockRemoteCollectionService(collectionPath: { "chores" })
    remote.store.goOffline()
    let chores = SyncedCollection(CollectionConfiguration<Chore>(collectionPath: "chores"), remote: remote,
                                  persistence: try SQLiteCollectionPersistence(managerKey: "synced-crash", directory: directory), managerKey: "synced-crash")
    for index in 0..<100_000 {
        if index % 2 == 1, let last = chores.value.last {
            chores.withLock { $0[id: last.clientId]?.done = true }
            try await chores.save()
            FileHandle.standardOutput.write(Data("done \(last.documentId!)\n".utf8))
        } else {
            chores.withLock { $0.append(Chore(title: "chore \(index)")) }
            try await chores.save()
            let made = chores.value.first { $0.title == "chore \(index)" }!
            FileHandle.standardOutput.write(Data("saved \(made.documentId!) chore \(index)\n".utf8))
        }
    }
    exit(0)
}
if arguments.count == 6, arguments[1] == "changes", let first = Int(arguments[5]) {
    // Sends records through a ChangeSyncEngine to a live server, signed in with TOKEN; after each
    // sendChanges returns (the change is on disk), prints "queued ID TITLE", so the test that
    // kills it knows which changes were promised. Every third change modifies a record the server
    // already saved (a version precondition), the others make new ones.
    //
    // Usage: CrashWriter changes DIRECTORY URL TOKEN FIRST
    final class Saved: ChangeSyncEngineDelegate {
        let records = Mutex<[SyncedRecord]>([])
        func syncEngine(_ engine: ChangeSyncEngine, didSendModifications records: [SentRecord], batch: Int) {
            self.records.withLock { $0.append(contentsOf: records.map(\.record)) }
        }
    }
    let directory = URL(fileURLWithPath: arguments[2], isDirectory: true)
    var configuration = TandemClientConfiguration()
    configuration.clientID = "crash-device"
    configuration.storageDirectory = directory
    configuration.token = arguments[4]
    configuration.logger.logLevel = .critical
    let client = TandemClient(url: URL(string: arguments[3])!, configuration: configuration)
    Task { try await client.run() }
    await client.waitUntilConnected()
    for await state in client.authStates() where state.uid != nil { break }
    let engine = try ChangeSyncEngine(client: client, configuration: ChangeSyncEngine.Configuration(zoneName: "crash"))
    let saved = Saved()
    engine.delegate = saved
    engine.start()
    // Each saved record is edited at most once, on top of the version the server gave it: any
    // conflict would mean a change applied twice.
    var edited: Set<String> = []
    for index in first..<(first + 100_000) {
        var record = SyncedRecord(id: "r\(index)", type: "Item", properties: ["title": .value(.string("item \(index)"))], metadata: RecordMetadata(version: Version(0)))
        if index % 3 == 2, let earlier = saved.records.withLock({ records in records.last { !edited.contains($0.id) } }) {
            record = earlier
            record.properties["title"] = .value(.string("item \(index), edited"))
            edited.insert(record.id)
        }
        try engine.sendChanges(modify: [record], delete: [])
        FileHandle.standardOutput.write(Data("queued \(record.id) \(record["title"]!.stringValue!)\n".utf8))
        if index % 4 == 0 { try await Task.sleep(for: .milliseconds(2)) }
    }
    exit(0)
}
guard arguments.count == 4, let first = Int(arguments[2]), let count = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: CrashWriter DIRECTORY FIRST COUNT\n".utf8))
    exit(2)
}
let directory = URL(fileURLWithPath: arguments[1], isDirectory: true)
let remote = MockRemoteCollectionService(collectionPath: { "counters" })
remote.store.goOffline()
let persistence = try SQLiteCollectionPersistence(managerKey: "crash", directory: directory)
let engine = CollectionSyncEngine<Counter>(remote: remote, managerKey: "crash", persistence: persistence, retryPolicy: .none)
for index in first..<(first + count) {
    // One increment of a shared counter (never merged: transforms stay apart) and one new document.
    try await engine.updateDocument(id: "total", data: ["n": .increment(1)])
    try await engine.saveDocument(Counter(id: "w\(index)", n: index))
    FileHandle.standardOutput.write(Data("returned \(index)\n".utf8))
}
FileHandle.standardOutput.write(Data("finished\n".utf8))
