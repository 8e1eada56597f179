import NIOCore
import NIOWebSocket

/// Writes one session's ``SessionOutbox`` onto its WebSocket channel, from the channel's own event
/// loop: a message queued by the fan-out hub or a request costs one hop to the event loop, where
/// everything waiting by then goes out in frames and one flush. (A writer task awaiting the outbox
/// and then the channel's async writer cost two hops per message, and with a thousand listeners on
/// twenty connections those hops were most of the fan-out's price.)
///
/// The outbox keeps counting a message's bytes until the socket took it: a client that reads too
/// slowly fills its budget and is disconnected, as before. A failed write ends the session.
final class SessionChannelWriter: Sendable {
    private let channel: any Channel
    private let outbox: SessionOutbox
    private let failed: @Sendable () -> Void
    private let frameBytes: Int

    /// - Parameters:
    ///   - frameBytes: the largest frame written; a longer message goes out as continuation frames.
    ///   - failed: called when a write fails (the connection is gone).
    init(channel: any Channel, outbox: SessionOutbox, frameBytes: Int, failed: @escaping @Sendable () -> Void) {
        self.channel = channel
        self.outbox = outbox
        self.frameBytes = frameBytes
        self.failed = failed
    }

    /// Starts writing what the outbox holds and whatever it is given later, until it closes.
    func start() {
        outbox.attach { [self] in
            channel.eventLoop.execute { self.drain() }
        }
    }

    /// On the event loop: writes every message waiting, then flushes once.
    private func drain() {
        guard let messages = outbox.takeAll(), !messages.isEmpty else { return }
        var bytes = 0
        for (index, (message, counted)) in messages.enumerated() {
            bytes += counted
            write(message, promise: index == messages.count - 1 ? settle(bytes) : nil)
        }
        channel.flush()
    }

    /// A promise for the last write of a drain: writes complete in order, so once it does, every
    /// message of the drain is on the wire.
    private func settle(_ bytes: Int) -> EventLoopPromise<Void> {
        let promise = channel.eventLoop.makePromise(of: Void.self)
        let outbox = self.outbox
        let failed = self.failed
        promise.futureResult.whenComplete { result in
            switch result {
            case .success: outbox.wrote(bytes)
            case .failure: failed()
            }
        }
        return promise
    }

    private func write(_ message: SessionOutbox.Outgoing, promise: EventLoopPromise<Void>?) {
        var buffer: ByteBuffer
        switch message {
        case .text(let text): buffer = channel.allocator.buffer(string: text)
        case .utf8(let bytes): buffer = channel.allocator.buffer(bytes: bytes)
        }
        guard buffer.readableBytes > frameBytes else {
            channel.write(WebSocketFrame(fin: true, opcode: .text, data: buffer), promise: promise)
            return
        }
        var opcode = WebSocketOpcode.text
        while buffer.readableBytes > frameBytes, let slice = buffer.readSlice(length: frameBytes) {
            channel.write(WebSocketFrame(fin: false, opcode: opcode, data: slice), promise: nil)
            opcode = .continuation
        }
        channel.write(WebSocketFrame(fin: true, opcode: .continuation, data: buffer), promise: promise)
    }
}
