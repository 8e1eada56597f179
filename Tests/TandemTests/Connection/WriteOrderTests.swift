import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// A writer's later sequences never reach the server ahead of its earlier ones: writes started
/// behind others go on the socket those went on, or not at all.
@Suite("Write order across connections", .timeLimit(.minutes(2)))
struct WriteOrderTests {
    static func write(_ id: String, _ sequence: UInt64) throws -> WriteRequest {
        WriteRequest([Mutation(path: try DocumentPath("items/\(id)"), kind: .set(["n": 1]), id: MutationID(clientID: "order-test", sequence: sequence))], isAtomic: true)
    }

    @Test("writes started behind others on a socket that has gone since fail unsent, and nothing of them reaches the server; on the same socket they go")
    func onlyOnTheEarlierSocket() async throws {
        let server = MockServer()
        let client = server.client
        await client.waitUntilConnected()
        let first = client.startWrites([try Self.write("a", 1)])
        let socket = try #require(first.socket, "sent on the open socket")
        let beside = client.startWrites([try Self.write("b", 2)], onlyOn: socket)
        #expect(beside.socket == socket)
        for answer in await first.answers() + beside.answers() { _ = try answer.get() }

        // The socket goes, and another comes.
        server.goOffline()
        server.goOnline()
        await client.waitUntilConnected()
        let behind = client.startWrites([try Self.write("c", 3)], onlyOn: socket)
        #expect(behind.socket == nil)
        let answer = await behind.answers()[0]
        #expect(throws: TandemError.self) { try answer.get() }
        #expect(server.documents[try DocumentPath("items/c")] == nil, "never sent")
        // Started afresh (as a first send is), it goes on the new socket.
        let again = client.startWrites([try Self.write("c", 3)])
        #expect(again.socket != nil && again.socket != socket)
        _ = try await again.answers()[0].get()
        #expect(server.documents[try DocumentPath("items/c")] != nil)
    }
}
