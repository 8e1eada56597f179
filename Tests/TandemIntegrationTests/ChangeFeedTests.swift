import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// One collection's change feed, page by page: the `fetch` request over the WebSocket and
/// `/v1/changes?collection=` over HTTP, on the real server.
@Suite("Change feed pages", .timeLimit(.minutes(5)))
struct ChangeFeedTests {
    @Test("a collection's feed comes in pages of whole commits, oldest first, its own documents alone; each page's version is the next page's since; past the newest version is out of range")
    func pages() async throws {
        let server = try await LiveServer.start()
        let running = RunningClient(server, id: "feed")
        await running.client.waitUntilConnected()
        // Five commits of five records, each beside a document of another collection.
        for commit in 0..<5 {
            var writes: [Mutation] = (0..<5).map { .set(documentPath("zones/z/records/r\(commit * 5 + $0)"), ["n": .int(commit * 5 + $0)]) }
            writes.append(.set(documentPath("elsewhere/e\(commit)"), ["n": .int(commit)]))
            _ = try await running.client.commit(writes)
        }
        _ = try await running.client.commit([.delete(documentPath("zones/z/records/r3"))])
        let target = ListenTarget.collection(try CollectionPath("zones/z/records"), Query())
        var since = Version(0)
        var pages: [ChangePage] = []
        while true {
            let page = try await running.client.changes(target, since: since, limit: 7)
            pages.append(page)
            since = page.version
            if !page.hasMore { break }
        }
        // The feed holds each document's latest state: r3 only as its deletion, at the end. 7 asked
        // for: the first commit's 4 and the second commit whole, 9; then 10; then the last 5 and
        // the deletion.
        #expect(pages.map(\.changes.count) == [9, 10, 6])
        #expect(pages.map(\.hasMore) == [true, true, false])
        let changes = pages.flatMap(\.changes)
        #expect(changes.allSatisfy { $0.path.parent.description == "zones/z/records" })
        #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.version <= $1.version })
        #expect(changes.last?.path.id == "r3" && changes.last?.document == nil, "the deletion comes last, as a removal")
        // A page with nothing new; a since past the newest version.
        let empty = try await running.client.changes(target, since: since)
        #expect(empty.changes.isEmpty && !empty.hasMore && empty.version >= since)
        await #expect(throws: TandemError.self) { try await running.client.changes(target, since: Version(since.rawValue + 1_000)) }
        do {
            _ = try await running.client.changes(target, since: Version(since.rawValue + 1_000))
        } catch let error as TandemError {
            #expect(error.code == .outOfRange)
        }

        // Over HTTP, the same feed.
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/changes?since=0&limit=100&collection=zones/z/records")!)
        request.httpMethod = "GET"
        let (data, _) = try await URLSession.shared.data(for: request)
        let body = try JSONText.parse(bytes: data)
        guard case .array(let all)? = body[field: "changes"] else {
            Issue.record("no changes in \(body)")
            return
        }
        #expect(all.count == 25 && body[field: "hasMore"] == false)
        await running.stop()
        await server.stop()
    }
}

/// A write refused because a document's version or existence did not hold is answered with the
/// document as it is, to a caller who may read it.
@Suite("Refusals that carry the document", .timeLimit(.minutes(5)))
struct PreconditionRefusalTests {
    @Test("of independent writes, the one whose version did not hold is refused with the document as it is now; the others apply; its replay carries no document")
    func refusedWithTheDocument() async throws {
        let server = try await LiveServer.start()
        let running = RunningClient(server, id: "conflicts")
        await running.client.waitUntilConnected()
        _ = try await running.client.commit([.set(documentPath("notes/a"), ["title": "first"]), .set(documentPath("notes/a"), ["title": "second"])])
        let current = try #require(try await server.store.document(at: documentPath("notes/a")))
        let writes = [
            Mutation(path: documentPath("notes/a"), kind: .set(["title": "stale"]), precondition: .version(Version(current.version.rawValue - 1)),
                     id: MutationID(clientID: "conflicts/w", sequence: 1)),
            Mutation(path: documentPath("notes/b"), kind: .set(["title": "new"]), precondition: .exists(false), id: MutationID(clientID: "conflicts/w", sequence: 2)),
        ]
        let answers = try await running.client.commit(requests: [WriteRequest(writes, isAtomic: false)])[0].get()
        #expect(answers[0].status == .refused && answers[0].error?.code == .failedPrecondition)
        #expect(answers[0].document?.data["title"] == "second" && answers[0].document?.version == current.version)
        #expect(answers[1].status == .applied)
        let again = try await running.client.commit(requests: [WriteRequest(writes, isAtomic: false)])[0].get()
        #expect(again[0].status == .refused && again[0].document == nil, "a replayed refusal is the decision, not the document's state now")
        await running.stop()
        await server.stop()
    }

    @Test("a precondition that fails on what an earlier write of its batch left is answered with the document as committed, or none, and names no version nobody committed: over the WebSocket and HTTP")
    func refusedOnAnEarlierWrite() async throws {
        let server = try await LiveServer.start()
        let stream = RawStream(port: server.port)
        #expect(await stream.hello("earlier"))
        // notes/x does not exist: the first write creates it, the second requires that it does not exist.
        stream.send(#"{"type": "write", "id": 1, "mutations": [{"op": "set", "path": "notes/x", "data": {"a": 1}}, {"op": "set", "path": "notes/x", "data": {"a": 2}, "precondition": {"exists": false}}]}"#)
        guard case .ack(1, let acknowledgements)? = await stream.next() else {
            Issue.record("expected the ack")
            return
        }
        #expect(acknowledgements.map(\.status) == [.refused, .refused])
        #expect(acknowledgements.allSatisfy { $0.document == nil }, "notes/x was never committed: \(acknowledgements)")
        #expect(acknowledgements.last?.error?.code == .failedPrecondition)
        let message = acknowledgements.last?.error?.message ?? ""
        #expect(!message.contains("version") && message.contains("write 1"), "the refusal names a version nobody committed, or not the earlier write: \(message)")
        #expect(try await server.store.document(at: documentPath("notes/x")) == nil)
        let next = try await server.store.commit([.set(documentPath("notes/h"), ["a": 1])])
        #expect(next.batch?.version == 1, "the next commit takes the version the refused write would have taken")

        // Over HTTP, notes/h at version 1: a set of it, then an update requiring version 1.
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)/v1/commit")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"writes": [{"op": "set", "path": "notes/h", "data": {"a": 2}}, {"op": "update", "path": "notes/h", "fields": {"b": 1}, "precondition": {"version": 1}}]}"#.utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        let body = try JSONText.parse(bytes: data)
        #expect((response as? HTTPURLResponse)?.statusCode == 412, "\(body)")
        #expect(body[field: "error"]?[field: "code"] == "failed-precondition", "\(body)")
        let text = body[field: "error"]?[field: "message"]?.stringValue ?? ""
        #expect(!text.contains("version 2") && text.contains("write 1"), "the 412 names a version nobody committed, or not the earlier write: \(text)")
        #expect(try await server.store.document(at: documentPath("notes/h"))?.data == ["a": 1])
        #expect(try await server.store.currentVersion() == 1)
        await stream.close()
        await server.stop()
    }
}
