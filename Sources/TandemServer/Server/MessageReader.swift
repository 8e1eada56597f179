import HummingbirdWebSocket
import NIOCore
import TandemCore

/// Puts a WebSocket connection's frames back together into messages, refusing what the server
/// cannot take without ending the session: a message over the request limit (its remaining frames
/// are skipped, however many) and a binary message. Pure: frames in, messages out.
///
/// The bytes of a text message are kept as they came — never decoded and repaired — so invalid
/// UTF-8 reaches the JSON parser, which refuses it.
struct MessageReader {
    enum Output {
        /// The frame continues a message that is not finished.
        case incomplete
        /// A whole text message, as its UTF-8 bytes.
        case text(ByteBuffer)
        /// A message that cannot be taken, with the error to answer it with, and its request id
        /// when its first bytes name one (an oversized write is answered by its id, so the client
        /// can tell which request failed).
        case refused(TandemError, id: Int?)
    }

    private enum Message {
        case none
        case text(ByteBuffer)
        case binary
        /// Its size so far, and its first bytes (for its request id).
        case oversized(Int, prefix: [UInt8])
    }

    /// How many of an oversized message's first bytes are kept to find its request id.
    static let prefixBytes = 512

    let limit: Int
    private var message = Message.none

    init(limit: Int) {
        self.limit = limit
    }

    private static func prefix(of buffer: ByteBuffer) -> [UInt8] {
        buffer.getBytes(at: buffer.readerIndex, length: min(prefixBytes, buffer.readableBytes)) ?? []
    }

    mutating func read(_ frame: WebSocketDataFrame) -> Output {
        read(frame.opcode, frame.data, fin: frame.fin)
    }

    mutating func read(_ opcode: WebSocketDataFrame.Opcode, _ data: ByteBuffer, fin: Bool) -> Output {
        let frame = (opcode: opcode, data: data, fin: fin)
        switch (frame.opcode, message) {
        case (.text, _):
            message = .text(frame.data)
        case (.binary, _):
            message = .binary
        case (.continuation, .text(var buffer)):
            var data = frame.data
            if buffer.readableBytes + data.readableBytes <= limit {
                buffer.writeBuffer(&data)
                message = .text(buffer)
            } else {
                message = .oversized(buffer.readableBytes + data.readableBytes, prefix: Self.prefix(of: buffer))
            }
        case (.continuation, .oversized(let size, let prefix)):
            message = .oversized(size + frame.data.readableBytes, prefix: prefix)
        case (.continuation, .binary):
            break
        case (.continuation, .none):
            // A continuation of nothing: the peer broke the framing; say so once it ends.
            message = .oversized(-1, prefix: [])
        }
        if case .text(let buffer) = message, buffer.readableBytes > limit {
            message = .oversized(buffer.readableBytes, prefix: Self.prefix(of: buffer))
        }
        guard frame.fin else { return .incomplete }
        defer { message = .none }
        switch message {
        case .text(let buffer):
            return .text(buffer)
        case .binary:
            return .refused(TandemError.invalidArgument("Send messages as JSON text frames, not binary."), id: nil)
        case .oversized(let size, _) where size < 0:
            return .refused(TandemError.invalidArgument("A continuation frame came without a message to continue; start each message with a text frame."), id: nil)
        case .oversized(let size, let prefix):
            return .refused(TandemError(.resourceExhausted, "The message is \(size) bytes; at most \(limit) are allowed. Nothing of it was read or applied; send smaller batches."),
                            id: ClientMessage.requestID(prefix: prefix))
        case .none:
            return .incomplete
        }
    }
}
