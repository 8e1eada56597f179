import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

/// Hummingbird's HTTP/1.1 + WebSocket upgrade channel with an ``HTTPConnectionGuard`` right after
/// the HTTP decoder, from the connection's first byte: that is where a malformed request surfaces
/// and where a silent or slow peer shows, before the framework's own handlers exist; and, when the
/// connection becomes a WebSocket, a ``WebSocketFrameGuard`` right after the frame decoder.
struct GuardedHTTPChannel: ServerChildChannel {
    typealias Value = HTTP1WebSocketUpgradeChannel.Value

    let inner: HTTP1WebSocketUpgradeChannel
    let timeouts: HTTPConnectionGuardStateMachine.Timeouts
    /// The largest body a request may declare: past it, refused from its head (413).
    let maximumBodyBytes: Int
    let clock: ServerClock

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let decoder = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(HTTPConnectionGuard(timeouts: timeouts, maximumBodyBytes: maximumBodyBytes, clock: clock), position: .after(decoder))
            // Behind the upgrade handler: puts the frame guard in place if the request upgrades.
            try channel.pipeline.syncOperations.addHandler(WebSocketUpgradeWatcher(), position: .last)
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}
