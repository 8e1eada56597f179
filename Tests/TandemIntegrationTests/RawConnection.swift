import Foundation
import Synchronization
import NIOCore
import NIOPosix
import TandemCore

/// A bare TCP connection to a server, for sending exact bytes — however malformed — and reading
/// what comes back. One task reads the socket into a buffer the read calls wait on.
final class RawConnection: Sendable {
    private struct State {
        var received: [UInt8] = []
        var closed = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// The state the reader task and the read calls share.
    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    /// Inbound only: bytes go out through the channel itself, and an outbound writer never
    /// finished would trap when the connection is dropped without `close()`.
    private let channel: NIOAsyncChannel<ByteBuffer, Never>
    private let shared = Shared()
    private let reader: Task<Void, Never>

    private init(channel: NIOAsyncChannel<ByteBuffer, Never>) {
        self.channel = channel
        let shared = self.shared
        reader = Task {
            let state = shared
            do {
                for try await chunk in channel.inbound {
                    let waiter = state.state.withLock { state in
                        state.received += Array(buffer: chunk)
                        defer { state.waiter = nil }
                        return state.waiter
                    }
                    waiter?.resume()
                }
            } catch {
                // A reset counts as closed.
            }
            let waiter = state.state.withLock { state in
                state.closed = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }

    static func open(port: Int) async throws -> RawConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(60))   // a hang guard: a loaded machine can take seconds to accept
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
                }
            }
        return RawConnection(channel: channel)
    }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    func send(_ text: String) async throws {
        try await send(Array(text.utf8))
    }

    /// Waits until `ready` finds what it needs in the bytes received (it returns how many to
    /// take), or the connection closes (then everything left is taken).
    private func take(_ ready: ([UInt8], Bool) -> Int?) async -> [UInt8] {
        while true {
            let taken = shared.state.withLock { state -> [UInt8]? in
                if let count = ready(state.received, state.closed) {
                    defer { state.received.removeFirst(count) }
                    return Array(state.received.prefix(count))
                }
                guard state.closed else { return nil }
                defer { state.received = [] }
                return state.received
            }
            if let taken { return taken }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = shared.state.withLock { state -> Bool in
                    if state.closed || ready(state.received, state.closed) != nil { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

    /// Bytes from the front of what came, once `ready` says how many make what it waits for (it
    /// sees the bytes and whether the connection closed); everything left when it closes first.
    func read(until ready: ([UInt8], Bool) -> Int?) async -> [UInt8] {
        await take(ready)
    }

    /// Everything the server sends until it closes the connection.
    func readUntilClosed() async throws -> String {
        String(decoding: await take { bytes, closed in closed ? bytes.count : nil }, as: UTF8.self)
    }

    /// One HTTP response with a Content-Length body (or none, for HEAD and 204); the connection stays open.
    func readResponse() async throws -> String {
        String(decoding: await take { bytes, closed in Self.responseLength(bytes) ?? (closed ? bytes.count : nil) }, as: UTF8.self)
    }

    static func responseLength(_ bytes: [UInt8]) -> Int? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let headLength = text.utf8.distance(from: text.startIndex, to: split.upperBound)
        let head = text[..<split.lowerBound].lowercased()
        let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        return bytes.count >= headLength + length ? headLength + length : nil
    }

    func close() async {
        try? await channel.channel.close()
        await reader.value
    }
}

/// The parts of an HTTP response read as text.
struct RawResponse {
    var status: Int
    var headers: [String: String]
    var body: String

    init?(_ text: String) {
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let lines = text[..<split.lowerBound].split(separator: "\r\n")
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.1 "), let status = Int(statusLine.dropFirst(9).prefix(3)) else { return nil }
        self.status = status
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        self.headers = headers
        body = String(text[split.upperBound...])
    }

    /// The code of a `{"error": {"code", "message"}}` body.
    var errorCode: String? {
        guard let value = try? JSONText.parse(body) else { return nil }
        return value[field: "error"]?[field: "code"]?.stringValue
    }
}
