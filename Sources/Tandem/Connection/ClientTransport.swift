import Logging
import NIOSSL
import Synchronization
import WSClient

/// One message from the server: text (the protocol's), or anything else, which is ignored.
package enum TransportMessage: Sendable {
    case text(String)
    case other
}

/// One open connection of a ``ClientTransport``.
package struct TransportConnection: Sendable {
    /// The server's messages, in order; it ends (or throws) when the connection closes.
    package let messages: AsyncThrowingStream<TransportMessage, any Error>
    /// Sends one text message; throws once the connection is gone.
    package let send: @Sendable (String) async throws -> Void
    /// Closes the connection, gracefully where the transport can.
    package let close: @Sendable () async -> Void

    package init(messages: AsyncThrowingStream<TransportMessage, any Error>, send: @escaping @Sendable (String) async throws -> Void,
                 close: @escaping @Sendable () async -> Void) {
        self.messages = messages
        self.send = send
        self.close = close
    }
}

/// How a ``TandemClient`` reaches its server, one connection per attempt: a WebSocket to
/// `/v1/stream` by default, or a server in the same process for tests and previews. The client's
/// connection state machine, its requests and its listeners are the same over either.
package protocol ClientTransport: Sendable {
    /// Where it connects, for logs and error messages.
    var endpoint: String { get }
    /// Opens a connection, runs `session` on it, and returns once the connection has closed.
    /// Throws when it cannot open.
    func connect(_ session: @escaping @Sendable (TransportConnection) async -> Void) async throws
}

/// Pulls an iterator from a `@Sendable` closure: one reader at a time, as a stream's `unfolding`.
package final class IteratorBox<Iterator: AsyncIteratorProtocol>: @unchecked Sendable {
    private var iterator: Iterator
    package init(_ iterator: Iterator) { self.iterator = iterator }
    package func next() async throws -> Iterator.Element? { try await iterator.next() }
}

/// A WebSocket to the server's `/v1/stream`.
struct WebSocketTransport: ClientTransport {
    let endpoint: String
    let maximumMessageBytes: Int
    /// For `wss://`: how the server's certificate is checked.
    let tls: TLSConfiguration?
    let logger: Logger

    func connect(_ session: @escaping @Sendable (TransportConnection) async -> Void) async throws {
        var configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 20)
        configuration.closeTimeout = .seconds(2)
        let client = WebSocketClient(url: endpoint, configuration: configuration, tlsConfiguration: tls, logger: logger) { [maximumMessageBytes] inbound, outbound, _ in
            let iterator = IteratorBox(inbound.messages(maxSize: maximumMessageBytes).makeAsyncIterator())
            let messages = AsyncThrowingStream<TransportMessage, any Error>(unfolding: {
                guard let message = try await iterator.next() else { return nil }
                if case .text(let text) = message { return .text(text) }
                return .other
            })
            await session(TransportConnection(
                messages: messages,
                send: { try await outbound.writeTextMessage($0) },
                close: { try? await outbound.close(.normalClosure, reason: nil) }))
        }
        try await client.run()
    }
}
