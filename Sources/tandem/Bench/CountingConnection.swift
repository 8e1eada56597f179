import NIOCore
import NIOPosix
import TandemCore

/// The bare listening side of the fan-out benchmark: one WebSocket connection, run entirely on its
/// event loop, that opens `targets` listeners on a collection and then counts what the server sends
/// without parsing it. It reads each frame's header, and only the tail of a final frame for the
/// version the `changes` message ends with.
///
/// A WebSocket client library hands every frame to a task through an async sequence, one thread
/// wake-up per frame; on two cores shared with the server that harness work, not the server's
/// fan-out, would be most of what the benchmark measured.
final class CountingConnection: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let id: String
    private let targets: Int
    private let collection: CollectionPath
    private let ready: Reached
    private let received: Reached
    private let failed: @Sendable (String) -> Void
    // Touched on the event loop only.
    private var upgraded = false
    private var pending = ByteBuffer()
    private var snapshots = 0

    init(id: String, targets: Int, collection: CollectionPath, ready: Reached, received: Reached, failed: @escaping @Sendable (String) -> Void) {
        self.id = id
        self.targets = targets
        self.collection = collection
        self.ready = ready
        self.received = received
        self.failed = failed
    }

    /// Connects to the server on `port` and runs until the connection closes.
    static func run(port: Int, id: String, targets: Int, collection: CollectionPath, ready: Reached, received: Reached) async throws {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(CountingConnection(
                        id: id, targets: targets, collection: collection, ready: ready, received: received,
                        failed: { message in Console.error("bench: listening connection \(id): \(message)") }))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        try await withTaskCancellationHandler {
            try await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        let request = "GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGFuZGVtLWJlbmNoLWtleQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        context.write(wrapOutboundOut(context.channel.allocator.buffer(string: request)), promise: nil)
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        pending.writeBuffer(&bytes)
        if !upgraded {
            guard let end = pending.readableBytesView.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
            let head = pending.readString(length: end.upperBound - pending.readerIndex) ?? ""
            guard head.hasPrefix("HTTP/1.1 101") else {
                failed("the upgrade was refused: \(head.prefix(80))")
                context.close(promise: nil)
                return
            }
            upgraded = true
            send(ClientMessage.hello(clientID: id, protocolVersion: TandemVersion.wireProtocol, token: nil).text, context: context)
            for target in 0..<targets {
                send(ClientMessage.listen(id: target + 1, target: .collection(collection, Query()), resumeFrom: nil).text, context: context)
            }
            context.flush()
        }
        while let (fin, payload) = nextFrame() {
            handle(fin: fin, payload: payload)
        }
        pending.discardReadBytes()
    }

    /// One server frame (unmasked) taken from `pending`, or nil until a whole one is there.
    private func nextFrame() -> (fin: Bool, payload: ByteBuffer)? {
        guard pending.readableBytes >= 2,
              let first = pending.getInteger(at: pending.readerIndex, as: UInt8.self),
              let second = pending.getInteger(at: pending.readerIndex + 1, as: UInt8.self) else { return nil }
        var header = 2
        var length = Int(second & 0x7F)
        if length == 126 {
            guard let extended = pending.getInteger(at: pending.readerIndex + 2, as: UInt16.self) else { return nil }
            header = 4
            length = Int(extended)
        } else if length == 127 {
            guard let extended = pending.getInteger(at: pending.readerIndex + 2, as: UInt64.self) else { return nil }
            header = 10
            length = Int(extended)
        }
        guard pending.readableBytes >= header + length else { return nil }
        pending.moveReaderIndex(forwardBy: header)
        guard let payload = pending.readSlice(length: length) else { return nil }
        return (first & 0x80 != 0, payload)
    }

    private func handle(fin: Bool, payload: ByteBuffer) {
        if snapshots < targets {
            if payload.readableBytesView.firstRange(of: Array(#""type":"snapshot""#.utf8)) != nil { snapshots += 1 }
            if snapshots == targets { ready.reach(.zero, connection: id) }
            return
        }
        // A whole `changes` message ends `…,"version":N}`.
        guard fin else { return }
        var version: UInt64 = 0, scale: UInt64 = 1
        for byte in payload.readableBytesView.reversed().dropFirst() {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { break }
            version += UInt64(byte - UInt8(ascii: "0")) * scale
            scale *= 10
        }
        received.reach(Version(version), connection: id)
    }

    /// Writes a text frame the way a client must: masked.
    private func send(_ text: String, context: ChannelHandlerContext) {
        let payload = Array(text.utf8)
        var frame = context.channel.allocator.buffer(capacity: payload.count + 14)
        frame.writeInteger(UInt8(0x81))
        if payload.count < 126 {
            frame.writeInteger(UInt8(0x80 | payload.count))
        } else if payload.count <= Int(UInt16.max) {
            frame.writeInteger(UInt8(0x80 | 126))
            frame.writeInteger(UInt16(payload.count))
        } else {
            frame.writeInteger(UInt8(0x80 | 127))
            frame.writeInteger(UInt64(payload.count))
        }
        let mask: [UInt8] = (0..<4).map { _ in UInt8.random(in: 0...255) }
        frame.writeBytes(mask)
        frame.writeBytes(payload.enumerated().map { $0.element ^ mask[$0.offset % 4] })
        context.write(wrapOutboundOut(frame), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failed("\(error)")
        context.close(promise: nil)
    }
}
