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
}
