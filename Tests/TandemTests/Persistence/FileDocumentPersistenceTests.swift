import Foundation
import Testing
import TandemCore
@testable import Tandem

@Suite("FileDocumentPersistence")
struct FileDocumentPersistenceTests {
    func sampleState() throws -> LocalDocumentState {
        var outbox = Outbox(clientID: "client-1")
        let path = try DocumentPath("users/ada")
        outbox.enqueue(.update(path, fields: ["score": 1.0], transforms: [.init("visits", .increment(1))]))
        outbox.enqueue(.delete(try DocumentPath("users/old")))
        return LocalDocumentState(
            documentID: "ada",
            base: Document(path: path, data: ["name": "Ada", "score": 2.0, "n": 2], version: 7, createTime: Date(timeIntervalSince1970: 10)),
            outbox: outbox,
            resumeVersion: 7
        )
    }

    @Test("state saved is the state loaded, exactly, from a fresh instance")
    func roundTrip() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let state = try sampleState()
        try FileDocumentPersistence(managerKey: "user", directory: directory.url).save(state)
        let loaded = try FileDocumentPersistence(managerKey: "user", directory: directory.url).load()
        #expect(loaded == state)
        #expect(loaded?.base?.data["score"] == .double(2.0))
    }

    @Test("nothing saved loads nil; clear removes the state")
    func emptyAndClear() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url)
        #expect(try persistence.load() == nil)
        try persistence.save(try sampleState())
        try persistence.clear()
        #expect(try persistence.load() == nil)
    }

    @Test("each manager key has its own file, even keys with slashes or dots")
    func keysAreSeparate() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let keys = ["a", "a/b", "../a", "a%2Fb", "ü"]
        for (index, key) in keys.enumerated() {
            var state = try sampleState()
            state.documentID = "doc-\(index)"
            try FileDocumentPersistence(managerKey: key, directory: directory.url).save(state)
        }
        for (index, key) in keys.enumerated() {
            let persistence = FileDocumentPersistence(managerKey: key, directory: directory.url)
            #expect(persistence.fileURL.deletingLastPathComponent().standardizedFileURL == directory.url.standardizedFileURL)
            #expect(try persistence.load()?.documentID == "doc-\(index)")
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        #expect(files.count == keys.count, "no temporary files are left behind: \(files)")
    }

    @Test("a damaged file is a data-loss error that says what to do, not a crash")
    func damagedFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url)
        try Data("{\"documentID\": ".utf8).write(to: persistence.fileURL)
        do {
            _ = try persistence.load()
            Issue.record("expected data-loss")
        } catch let error as TandemError {
            #expect(error.code == .dataLoss)
            #expect(error.message.contains("move the file away"))
        }
    }

    @Test("a save costs one flush to disk, as the collection engines' SQLite commit does")
    func oneFlushPerSave() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url)
        var state = try sampleState()
        try persistence.save(state)
        #expect(persistence.flushCount == 2, "the journal and, once, the directory that holds it")
        for visits in 0..<10 {
            state.base?.data["visits"] = .int(visits)
            try persistence.save(state)
        }
        #expect(persistence.flushCount == 12)
        #expect(try FileDocumentPersistence(managerKey: "user", directory: directory.url).load() == state)
    }

    @Test("a save cut off by a crash leaves the state before it; damage before the last record is data loss")
    func tornSave() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url)
        var state = try sampleState()
        try persistence.save(state)
        state.documentID = "second"
        try persistence.save(state)
        let good = try Data(contentsOf: persistence.journalURL)

        // Half a record, no newline.
        try (good + Data(FileDocumentPersistence.record(#"{"documentID": "third"}"#).utf8.prefix(20))).write(to: persistence.journalURL)
        #expect(try persistence.load()?.documentID == "second")
        // A whole line whose checksum does not match (its blocks written out of order).
        try (good + Data("0000000000000000 {\"documentID\": \"third\"}\n".utf8)).write(to: persistence.journalURL)
        #expect(try persistence.load()?.documentID == "second")
        // A save after a torn one starts on its own line, so it survives the next crash.
        try (good + Data(FileDocumentPersistence.record(#"{"documentID": "third"}"#).utf8.prefix(20))).write(to: persistence.journalURL)
        state.documentID = "fourth"
        try persistence.save(state)
        #expect(try FileDocumentPersistence(managerKey: "user", directory: directory.url).load()?.documentID == "fourth")

        // Damage before the last record is not a torn save: both records bad.
        var damaged = good
        damaged[5] = UInt8(ascii: "x")
        damaged[damaged.count - 5] = UInt8(ascii: "x")
        try damaged.write(to: persistence.journalURL)
        #expect(throws: TandemError.self) { _ = try persistence.load() }
    }

    @Test("past its size the journal folds into the snapshot, and every state still loads")
    func folds() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url, compactAfter: 8_192)
        var state = try sampleState()
        for visits in 0..<40 {
            state.base?.data["visits"] = .int(visits)
            try persistence.save(state)
            #expect(try FileDocumentPersistence(managerKey: "user", directory: directory.url).load() == state)
        }
        let journal = try FileManager.default.attributesOfItem(atPath: persistence.journalURL.path)[.size] as? Int ?? 0
        #expect(journal <= 8_192, "folded: \(journal) bytes left")
        #expect(FileManager.default.fileExists(atPath: persistence.fileURL.path))
        #expect(persistence.flushCount < 40 * 2, "fewer flushes than an atomic file replaced on every save")
    }

    @Test("a state saved as one file by an earlier version still loads")
    func earlierFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let persistence = FileDocumentPersistence(managerKey: "user", directory: directory.url)
        let state = try sampleState()
        try Data(JSONText.encode(try JSONValueEncoder().encode(state)).utf8).write(to: persistence.fileURL)
        #expect(try persistence.load() == state)
    }
}
