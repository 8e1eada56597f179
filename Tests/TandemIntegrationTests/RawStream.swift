import Foundation
import Logging
import Synchronization
import TandemCore
import TandemTesting
import NIOCore
import NIOWebSocket
import WSClient

/// A bare WebSocket to `/v1/stream`, for sending the server exactly the bytes a test wants.
final class RawStream: Sendable {
    private let inbox = Inbox()
    /// Messages from the server that were not a valid server message (kept out of the inbox).
    let malformed = Locked(0)
    private let outgoing: AsyncStream<WebSocketOutboundWriter.OutboundFrame>.Continuation
    private let task: Task<Void, any Error>

    init(port: Int) {
        let inbox = self.inbox
        let malformed = self.malformed
        let (frames, outgoing) = AsyncStream.makeStream(of: WebSocketOutboundWriter.OutboundFrame.self)
        self.outgoing = outgoing
        var logger = Logger(label: "raw")
        logger.logLevel = .critical
        let client = WebSocketClient(url: "ws://127.0.0.1:\(port)/v1/stream", configuration: .init(maxFrameSize: 1 << 20), logger: logger) { inbound, outbound, _ in
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await frame in frames {
                        if case .text(let text) = frame {
                            try? await outbound.writeTextMessage(text)
                        } else {
                            try? await outbound.write(frame)
                        }
                    }
                }
                do {
                    for try await message in inbound.messages(maxSize: 64 << 20) {
                        if case .text(let text) = message {
                            if let parsed = try? ServerMessage(wire: try JSONText.parse(text)) {
                                inbox.put(parsed)
                            } else {
                                malformed.withLock { $0 += 1 }
                            }
                        }
                    }
                } catch {}
                inbox.close()
                outgoing.finish()
            }
        }
        // However the client ends — a refused connection included — the inbox closes, so a reader
        // never waits for a connection that is gone.
        task = Task {
            defer {
                inbox.close()
                outgoing.finish()
            }
            try await client.run()
        }
    }

    func send(_ text: String) { outgoing.yield(.text(text)) }
    func send(_ message: ClientMessage) { send(message.text) }

    /// Says hello with the current protocol; whether the server answered welcome.
    func hello(_ clientID: String) async -> Bool {
        send(.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: nil))
        guard case .welcome? = await next() else { return false }
        return true
    }
    func sendBinary(_ bytes: [UInt8]) { outgoing.yield(.binary(ByteBuffer(bytes: bytes))) }
    /// A text frame holding exactly these bytes, valid UTF-8 or not.
    func sendBytes(_ bytes: [UInt8]) { outgoing.yield(.custom(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(bytes: bytes)))) }
    /// One text message in several frames, one per piece.
    func sendFragments(_ pieces: [[UInt8]]) {
        for (index, piece) in pieces.enumerated() {
            outgoing.yield(.custom(WebSocketFrame(fin: index == pieces.count - 1, opcode: index == 0 ? .text : .continuation, data: ByteBuffer(bytes: piece))))
        }
    }

    /// The next message that is not a heartbeat (or any message, with `heartbeats`); nil when the
    /// connection closed.
    func next(heartbeats: Bool = false) async -> ServerMessage? {
        while let message = await inbox.take() {
            if message == .heartbeat && !heartbeats { continue }
            return message
        }
        return nil
    }

    /// Closes the connection from this side: a reader waiting for a message gets nil at once,
    /// whether or not the peer ever answers the close.
    func close() async {
        inbox.close()
        outgoing.finish()
        task.cancel()
    }
}

/// Messages received and not yet taken; nil once the connection closed.
final class Inbox: Sendable {
    private struct State {
        var queue: [ServerMessage?] = []
        var closed = false
        var waiter: CheckedContinuation<ServerMessage??, Never>?
    }
    private let state = Mutex(State())

    func put(_ message: ServerMessage?) {
        let waiter = state.withLock { state -> CheckedContinuation<ServerMessage??, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.queue.append(message)
            return nil
        }
        waiter?.resume(returning: .some(message))
    }

    func close() {
        let waiter = state.withLock { state -> CheckedContinuation<ServerMessage??, Never>? in
            state.closed = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The next message (which may be nil when it did not parse), or nil when closed.
    func take() async -> ServerMessage? {
        let next: ServerMessage?? = await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> ServerMessage??? in
                if !state.queue.isEmpty { return .some(.some(state.queue.removeFirst())) }
                if state.closed { return .some(nil) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
        return next ?? nil
    }
}
