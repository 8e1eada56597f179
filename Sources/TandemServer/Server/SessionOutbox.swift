import Synchronization
import TandemCore

/// The messages waiting to be written to one WebSocket connection. Sending never blocks: a
/// connection whose client reads too slowly overflows its byte budget and is closed (it resumes
/// later from its last version), so one slow consumer never makes the server buffer without bound.
///
/// Live changes for the same listeners merge while they wait: a batch sent while the one before it
/// is still queued (the connection's writer is busy) joins it, whole commits after whole commits, at
/// the later version. A connection that keeps up gets each commit at once; one that falls behind
/// gets fewer, larger messages instead of a growing queue.
final class SessionOutbox: Sendable {
    private enum Item {
        /// A message written already.
        case text(String, bytes: Int)
        /// Live changes for `targets` (a JSON array of changes, as ``WireWriter/changes(_:)``
        /// writes it), up to `version`; `bytes` is what the queue counts for it.
        case changes(targets: [Int], changes: [UInt8], version: Version, bytes: Int)
    }

    private struct State {
        var items: [Item] = []
        var head = 0
        var queuedBytes = 0
        var closed = false
        var overflowed = false
        var waiter: CheckedContinuation<Void, Never>?
        /// The writer pushing this outbox onto its connection, if one is attached (otherwise a
        /// writer pulls with ``next()``), and whether it was told about the messages queued.
        var drain: Callback?
        var drainScheduled = false
    }

    private let state = Mutex(State())
    private let budget: Int
    /// Counts the bytes queued and the errors answered (``ServerMetrics``).
    private let metrics: ServerMetrics?
    private let overflowHandler = Mutex<Callback?>(nil)

    /// The overflow handler and the attached writer, kept in a box: a closure stored directly in a
    /// `Mutex` is thunked again at every access.
    private final class Callback: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    /// Called once when the outbox overflows.
    var onOverflow: (@Sendable () -> Void)? {
        get { overflowHandler.withLock { $0?.call } }
        set { overflowHandler.withLock { $0 = newValue.map(Callback.init) } }
    }

    init(budget: Int, metrics: ServerMetrics? = nil) {
        self.budget = budget
        self.metrics = metrics
    }

    /// Queues a message; false when the connection is over its budget (or closed) and must go.
    @discardableResult
    func send(_ message: ServerMessage) -> Bool {
        if case .error(_, let error) = message { metrics?.answered(error) }
        return send(text: message.text)
    }

    /// Queues a message already written as text.
    @discardableResult
    func send(text: String) -> Bool {
        let bytes = text.utf8.count
        return enqueue(bytes: bytes) { state in
            state.items.append(.text(text, bytes: bytes))
        }
    }

    /// Queues live changes for one or more listeners of this connection, merging them into the
    /// batch for the same listeners still waiting to be written, if there is one.
    @discardableResult
    func send(changes: [UInt8], targets: [Int], version: Version) -> Bool {
        let bytes = changes.count + 64 + targets.count * 8
        return enqueue(bytes: bytes) { state in
            if state.items.count > state.head, case .changes(let waiting, var queued, _, let counted) = state.items[state.items.count - 1], waiting == targets {
                // `[a,b]` and `[c]` make `[a,b,c]`.
                queued.removeLast()
                if changes.count > 2 {
                    if queued.count > 1 { queued.append(UInt8(ascii: ",")) }
                    queued.append(contentsOf: changes.dropFirst())
                } else {
                    queued.append(UInt8(ascii: "]"))
                }
                state.items[state.items.count - 1] = .changes(targets: targets, changes: queued, version: version, bytes: counted + bytes)
            } else {
                state.items.append(.changes(targets: targets, changes: changes, version: version, bytes: bytes))
            }
        }
    }

    private func enqueue(bytes: Int, _ add: (inout State) -> Void) -> Bool {
        var overflowedNow = false
        var drain: Callback?
        let (accepted, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            if state.closed || state.overflowed { return (false, nil) }
            if state.queuedBytes + bytes > budget {
                // Counted in the same step, so whoever sees the connection dropped sees it counted.
                metrics?.disconnectedSlowConsumer()
                state.overflowed = true
                state.drain = nil
                overflowedNow = true
                defer { state.waiter = nil }
                return (false, state.waiter)
            }
            state.queuedBytes += bytes
            add(&state)
            if !state.drainScheduled, let attached = state.drain {
                state.drainScheduled = true
                drain = attached
            }
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume()
        drain?.call()
        if accepted { metrics?.sent(bytes: bytes) }
        if overflowedNow { onOverflow?() }
        return accepted
    }

    /// Attaches the writer that pushes this outbox onto its connection: `drain` is called (outside
    /// the outbox's lock) whenever messages wait and it was not called for them yet, and is to
    /// call ``takeAll()``. Cleared when the outbox closes or overflows.
    func attach(drain: @escaping @Sendable () -> Void) {
        let box = Callback(drain)
        let now = state.withLock { state -> Bool in
            guard !state.closed, !state.overflowed else { return false }
            state.drain = box
            guard state.head < state.items.count, !state.drainScheduled else { return false }
            state.drainScheduled = true
            return true
        }
        if now { drain() }
    }

    /// A message ready to write: text as queued, or live changes written out as UTF-8 bytes
    /// (never made a `String`, which would check the bytes again).
    enum Outgoing {
        case text(String)
        case utf8([UInt8])

        var text: String {
            switch self {
            case .text(let text): text
            case .utf8(let bytes): String(decoding: bytes, as: UTF8.self)
            }
        }
    }

    /// Every message waiting, in order, with the bytes each counts for (give them to
    /// ``wrote(_:)`` once on the wire), for an attached writer; nil once the outbox is closed or
    /// overflowed. The writer is called again for the messages queued after this.
    func takeAll() -> [(message: Outgoing, bytes: Int)]? {
        let taken = state.withLock { state -> [Item]? in
            state.drainScheduled = false
            if state.closed || state.overflowed { return nil }
            let items = Array(state.items[state.head...])
            state.items.removeAll(keepingCapacity: true)
            state.head = 0
            return items
        }
        return taken?.map(Self.outgoing)
    }

    private static func outgoing(_ item: Item) -> (message: Outgoing, bytes: Int) {
        switch item {
        case .text(let text, let bytes):
            return (.text(text), bytes)
        case .changes(let targets, let changes, let version, let bytes):
            let utf8 = targets.count == 1
                ? WireWriter.batchBytes(target: targets[0], changes: changes, version: version, isSnapshot: false, reset: false, more: false)
                : WireWriter.sharedBatchBytes(targets: targets, changes: changes, version: version)
            return (.utf8(utf8), bytes)
        }
    }

    /// The next message to write and the bytes it counts for (give them to ``wrote(_:)`` once it
    /// is on the wire); nil once the outbox is closed or overflowed.
    func next() async -> (text: String, bytes: Int)? {
        while true {
            let taken = state.withLock { state -> Item?? in
                if state.closed || state.overflowed { return .some(nil) }
                guard state.head < state.items.count else { return nil }
                let item = state.items[state.head]
                state.head += 1
                if state.head == state.items.count {
                    state.items.removeAll(keepingCapacity: true)
                    state.head = 0
                } else if state.head >= 64, state.head * 2 >= state.items.count {
                    state.items.removeFirst(state.head)
                    state.head = 0
                }
                return .some(item)
            }
            switch taken {
            case .some(nil):
                return nil
            case .some(let item?):
                let (message, bytes) = Self.outgoing(item)
                return (message.text, bytes)
            case nil:
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { state -> Bool in
                        if state.closed || state.overflowed || state.head < state.items.count { return true }
                        state.waiter = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }

    /// Called by the writer once a message is on the wire, with the bytes ``next()`` counted for it.
    func wrote(_ bytes: Int) {
        state.withLock { $0.queuedBytes -= bytes }
    }

    /// Whether the connection was dropped for reading too slowly.
    var isOverflowed: Bool { state.withLock { $0.overflowed } }

    /// Messages queued and not taken by the writer yet.
    var queuedCount: Int { state.withLock { $0.items.count - $0.head } }

    func finish() {
        let waiter = state.withLock { state in
            state.closed = true
            state.drain = nil
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Whether the session is gone (closed or overflowed): sending to it is pointless.
    var isClosed: Bool { state.withLock { $0.closed || $0.overflowed } }
}
