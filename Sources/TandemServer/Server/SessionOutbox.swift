import Synchronization
import TandemCore

/// The frames waiting to be written to one WebSocket connection. Sending never blocks: a connection
/// whose client reads too slowly overflows its byte budget and is closed (it resumes later from its
/// last version), so one slow consumer never makes the server buffer without bound.
final class SessionOutbox: Sendable {
    let frames: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation
    private let queuedBytes = Atomic<Int>(0)
    private let budget: Int
    private let overflowed = Atomic<Bool>(false)
    private let overflowHandler = Mutex<(@Sendable () -> Void)?>(nil)

    /// Called once when the outbox overflows.
    var onOverflow: (@Sendable () -> Void)? {
        get { overflowHandler.withLock { $0 } }
        set { overflowHandler.withLock { $0 = newValue } }
    }

    init(budget: Int) {
        self.budget = budget
        (frames, continuation) = AsyncStream.makeStream(of: String.self)
    }

    /// Queues a message; false when the connection is over its budget (or closed) and must go.
    @discardableResult
    func send(_ message: ServerMessage) -> Bool {
        send(text: message.text)
    }

    /// Queues a message already written as text.
    @discardableResult
    func send(text: String) -> Bool {
        if overflowed.load(ordering: .relaxed) { return false }
        let total = queuedBytes.add(text.utf8.count, ordering: .relaxed).newValue
        if total > budget {
            if !overflowed.exchange(true, ordering: .relaxed) {
                continuation.finish()
                onOverflow?()
            }
            return false
        }
        if case .terminated = continuation.yield(text) { return false }
        return true
    }

    /// Called by the writer once a frame is on the wire.
    func wrote(_ text: String) {
        queuedBytes.subtract(text.utf8.count, ordering: .relaxed)
    }

    /// Whether the connection was dropped for reading too slowly.
    var isOverflowed: Bool { overflowed.load(ordering: .relaxed) }

    func finish() {
        closed.store(true, ordering: .relaxed)
        continuation.finish()
    }

    private let closed = Atomic<Bool>(false)

    /// Whether the session is gone (closed or overflowed): sending to it is pointless.
    var isClosed: Bool { closed.load(ordering: .relaxed) || overflowed.load(ordering: .relaxed) }
}
