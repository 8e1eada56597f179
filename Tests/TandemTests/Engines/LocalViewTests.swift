import Foundation
import Testing
@testable import Tandem
import TandemCore

@Suite("Local view")
struct LocalViewTests {
    @Test("an acknowledged delete is not undone by a listener still catching up: older news of the document is not taken, the delete's own news clears the mark, and a later creation shows")
    func acknowledgedDeleteStays() throws {
        let path = try DocumentPath("todos/a")
        let created = Document(path: path, data: ["memo": "a"], version: 3)
        var view = LocalView(base: [created], outbox: Outbox(clientID: "w"), now: Date())
        let entry = view.enqueue(.delete(path), now: Date()).entry
        #expect(view.documents[path] == nil)
        view.acknowledge(entry, result: nil, version: 7, now: Date())
        // The listener, behind, brings the document as it was at version 5.
        let stale = Document(path: path, data: ["memo": "a, edited"], version: 5)
        _ = view.applyRemote(RemoteChangeBatch(isSnapshot: false, changes: [.upsert(stale)], version: 5), now: Date())
        #expect(view.documents[path] == nil, "the deleted document came back")
        // Its delete arrives, then someone makes it again.
        _ = view.applyRemote(RemoteChangeBatch(isSnapshot: false, changes: [RemoteChange(path: path, document: nil, version: 7)], version: 7), now: Date())
        #expect(view.documents[path] == nil)
        let again = Document(path: path, data: ["memo": "again"], version: 9)
        _ = view.applyRemote(RemoteChangeBatch(isSnapshot: false, changes: [.upsert(again)], version: 9), now: Date())
        #expect(view.documents[path]?.data == ["memo": "again"])
    }
}
