// Writes through a CollectionSyncEngine with local persistence while its server is offline, and
// prints "returned N" after each write call returns, so the test that kills it with SIGKILL
// knows which writes were promised.
//
// Usage: CrashWriter DIRECTORY FIRST COUNT
import Foundation
import Tandem
import TandemCore
import TandemTesting

struct Counter: SyncModel {
    var id: String
    var n: Int
}

let arguments = CommandLine.arguments
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
