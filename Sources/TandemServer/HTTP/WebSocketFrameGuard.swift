import NIOCore
import NIOHTTP1
import NIOWebSocket

/// Checks each frame a client sends before the WebSocket session reads it, for what the framing
/// rules require and the frame reader above does not check:
/// - every frame a client sends is masked (RFC 6455 §5.1);
/// - a text or binary frame never starts inside a fragmented message, and a continuation frame
///   always continues one (§5.4).
///
/// A frame that breaks them fails the connection with close code 1002 (protocol error). A frame over
/// the size limit is answered with close code 1009 (message too big) and the connection's output is
/// closed, so the close frame reaches the client whole before the socket goes; what is still on its
/// way from the client is read and dropped until it closes its side (or the session's watchdog
/// closes it for silence).
final class WebSocketFrameGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var inMessage = false
    private var failed = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        let frame = unwrapInboundIn(data)
        if let violation = Self.violation(frame, inMessage: &inMessage) {
            fail(context: context, code: .protocolError, reason: violation, closeOutputOnly: false)
            return
        }
        context.fireChannelRead(data)
    }

    /// What is wrong with `frame` from a client, given whether a fragmented message is under way
    /// (updated for the next frame); nil when nothing is.
    static func violation(_ frame: WebSocketFrame, inMessage: inout Bool) -> String? {
        guard frame.maskKey != nil else { return "client frames must be masked" }
        switch frame.opcode {
        case .text, .binary:
            if inMessage { return "a new message began inside a fragmented one" }
            inMessage = !frame.fin
        case .continuation:
            if !inMessage { return "a continuation frame came with no message to continue" }
            inMessage = !frame.fin
        default:
            // Control frames may come between fragments; the session answers them.
            break
        }
        return nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? NIOWebSocketError, error == .invalidFrameLength {
            fail(context: context, code: .messageTooLarge, reason: "frame over the size limit", closeOutputOnly: true)
            return
        }
        context.fireErrorCaught(error)
    }

    private func fail(context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String, closeOutputOnly: Bool) {
        guard !failed else { return }
        failed = true
        var data = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        data.write(webSocketErrorCode: code)
        // A control frame's payload is at most 125 bytes.
        data.writeString(String(reason.utf8.prefix(120))!)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in
            channel.close(mode: closeOutputOnly ? .output : .all, promise: nil)
        }
    }
}

/// Sits after the HTTP upgrade handler until the connection's first request is decided: when it
/// becomes a WebSocket, puts a ``WebSocketFrameGuard`` right after the frame decoder (before any
/// frame is read: bytes read during the upgrade are handed on only after this event); when it
/// stays HTTP, steps out at the first request part. Everything else passes through untouched.
final class WebSocketUpgradeWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any
    typealias InboundOut = Any

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .upgradeComplete = event as? HTTPServerUpgradeEvents {
            do {
                let decoder = try context.pipeline.syncOperations.handler(type: ByteToMessageHandler<WebSocketFrameDecoder>.self)
                try context.pipeline.syncOperations.addHandler(WebSocketFrameGuard(), position: .after(decoder))
            } catch {
                // No frame decoder: nothing to guard (never the case for a WebSocket upgrade).
            }
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}
