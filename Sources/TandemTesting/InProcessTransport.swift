import Foundation
import Tandem
import TandemCore
import TandemServer

/// Clients of an `InProcessServer`, for tests and previews.
extension TandemClient {
    /// A client of a server in this process: the same client, engines, requests and listeners as
    /// over a WebSocket, and the server's real sessions, fan-out and store, without a port. For
    /// tests and previews that want the real semantics. Run it (`client.run()`) as any client;
    /// `setOnline(false)` and `dropConnection(afterAcknowledgements:)` cut it off as a network would.
    ///
    /// ```swift
    /// let server = InProcessServer(store: MemoryServerStore())
    /// let client = TandemClient.inProcess(server)
    /// let todos = CollectionSyncEngine<Todo>(
    ///     remote: TandemRemoteCollectionService(client: client, collection: try CollectionPath("todos")),
    ///     managerKey: "todos", persistence: nil)
    /// ```
    ///
    /// Without a `clientID` in the configuration, each client gets a new one (none is kept on disk).
    public static func inProcess(_ server: InProcessServer, configuration: TandemClientConfiguration = TandemClientConfiguration()) -> TandemClient {
        var configuration = configuration
        if configuration.clientID == nil { configuration.clientID = "in-process-\(UUID().uuidString.lowercased())" }
        return TandemClient(url: URL(string: "tandem-in-process://server")!, transport: InProcessTransport(server: server), configuration: configuration)
    }
}

/// Connections to an ``InProcessServer``, one per attempt.
struct InProcessTransport: ClientTransport {
    let server: InProcessServer

    var endpoint: String { "tandem-in-process://server" }

    func connect(_ session: @escaping @Sendable (TransportConnection) async -> Void) async throws {
        let connection = server.connect()
        let iterator = IteratorBox(connection.messages.makeAsyncIterator())
        let messages = AsyncThrowingStream<TransportMessage, any Error>(unfolding: {
            try await iterator.next().map { .text($0) }
        })
        await session(TransportConnection(messages: messages, send: { connection.send($0) }, close: { connection.close() }))
        connection.close()
    }
}
