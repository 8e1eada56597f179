import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Hummingbird's HTTP/1.1 + WebSocket upgrade channel with an ``HTTPConnectionGuard`` right after
/// the HTTP decoder, from the connection's first byte: that is where a malformed request surfaces
/// and where a silent or slow peer shows, before the framework's own handlers exist; and, when the
/// connection becomes a WebSocket, a ``WebSocketFrameGuard`` right after the frame decoder.
struct GuardedHTTPChannel: ServerChildChannel {
    /// The framework's value, with whether the guard answered and closed the connection itself.
    struct Value: ServerChildChannelValue {
        let inner: HTTP1WebSocketUpgradeChannel.Value
        let closedByGuard: ClosedByGuard
        var channel: any Channel { inner.channel }
    }

    /// Set by the guard when it answers a request itself and closes the connection.
    final class ClosedByGuard: Sendable {
        let value = Atomic(false)
    }

    let inner: HTTP1WebSocketUpgradeChannel
    let timeouts: HTTPConnectionGuardStateMachine.Timeouts
    /// The largest body a request may declare: past it, refused from its head (413).
    let maximumBodyBytes: Int
    /// Which web pages may drive the server: refused from the head otherwise.
    let sites: SitePolicy
    let clock: ServerClock
    /// The connections served at once; past the cap, a connection answers health probes only.
    var capacity: ConnectionCapacity?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let closed = ClosedByGuard()
            var probesOnly: ConnectionCapacity?
            if let capacity {
                if capacity.opened() { probesOnly = capacity }
                channel.closeFuture.whenComplete { _ in capacity.closed() }
            }
            let decoder = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(HTTPConnectionGuard(timeouts: timeouts, maximumBodyBytes: maximumBodyBytes, sites: sites, clock: clock, closed: closed,
                                                                                 probesOnly: probesOnly),
                                                           position: .after(decoder))
            // Behind the upgrade handler: puts the frame guard in place if the request upgrades.
            try channel.pipeline.syncOperations.addHandler(WebSocketUpgradeWatcher(), position: .last)
            return Value(inner: value, closedByGuard: closed)
        }
    }

    func handle(value: Value, logger: Logger) async {
        // Once the guard has answered a malformed request (or refused an upgrade, or timed a peer
        // out) and closed the connection, the framework logs the upgrade it was waiting for as
        // failed, at error level: anyone could fill the log so. The guard's answer said all there
        // is; what the framework logs after it goes at debug level.
        var quiet = logger
        quiet.handler = QuietOnceClosed(inner: logger.handler, closed: value.closedByGuard)
        await inner.handle(value: value.inner, logger: quiet)
    }
}

/// A log handler that, once the guard closed its connection, passes errors on at debug level.
struct QuietOnceClosed: LogHandler {
    var inner: any LogHandler
    let closed: GuardedHTTPChannel.ClosedByGuard

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        if event.level > .debug, closed.value.load(ordering: .relaxed) {
            guard inner.logLevel <= .debug else { return }
            event.level = .debug
        }
        inner.log(event: event)
    }
}
