import Foundation
import Testing
import TandemCore
import TandemServer

/// The code of the TandemServer article "The wire protocol" (`WireProtocol.md`): a conversation
/// with a server in this process, in the protocol's own messages.
@Suite("Wire protocol article", .timeLimit(.minutes(5)))
struct WireProtocolSnippets {
    @Test("the article's conversation: welcome, a snapshot, then the write's ack and the listener's changes in either order")
    func conversation() async throws {
        // snippet: wire-protocol-in-process
        let server = InProcessServer(store: MemoryServerStore())
        let connection = server.connect()
        var replies = connection.messages.makeAsyncIterator()
        connection.send(#"{"type": "hello", "clientId": "docs-device", "protocol": 3}"#)
        let welcome = await replies.next()    // {"heartbeatSeconds":10,"protocol":3,"server":"…","type":"welcome"}
        connection.send(#"{"type": "listen", "id": 1, "target": {"collection": "notes"}}"#)
        let snapshot = await replies.next()   // listener 1's first batch: a snapshot, empty so far
        connection.send(#"{"type": "write", "id": 2, "mutations": [{"op": "set", "path": "notes/a", "data": {"title": "Hi"}, "id": {"client": "docs-device/notes", "sequence": 1}}]}"#)
        let first = await replies.next()      // the ack of write 2 and listener 1's changes,
        let second = await replies.next()     // in either order: match answers by id
        connection.close()
        server.stop()
        // end snippet
        func kind(_ message: String?) throws -> String? {
            try JSONText.parse(message ?? "null")[field: "type"]?.stringValue
        }
        #expect(try kind(welcome) == "welcome")
        #expect(try kind(snapshot) == "snapshot")
        let answers = try Set([kind(first), kind(second)].compactMap { $0 })
        #expect(answers == ["ack", "changes"])
    }

    @Test("the OpenAPI description is written for a server's own limits")
    func openAPI() {
        // snippet: wire-protocol-openapi
        var limits = ServerLimits()
        limits.maximumBatchWrites = 100
        let description = OpenAPIDescription.text(limits: limits)   // what /v1/openapi.json serves with these limits
        // end snippet
        #expect(description.contains("x-tandem-limits"))
    }
}
