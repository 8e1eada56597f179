import Dispatch
import Synchronization

/// An engine's serial executor: every change of the engine's view together with its persistence
/// runs here, one at a time, in the order it was queued, on a thread of its own.
///
/// The model is a database's serialized writer. A caller that needs the change done awaits it and
/// is suspended, not blocked: no thread of the cooperative pool waits on the disk. A caller that
/// must not wait (the connection's reader telling an event, an app's synchronous call from the main
/// actor such as `stopListening()`) queues the change and goes on; the change runs after every one
/// queued before it, so the durable order of the engine's changes is the order they were asked for.
///
/// Work running here must never wait for this queue (``sync(_:)`` from inside it would deadlock):
/// it queues further work instead.
final class EngineQueue: Sendable {
    private let queue: DispatchQueue
    /// Marks the queue's threads, so a step can tell it runs here (``isCurrent``).
    private static let key = DispatchSpecificKey<ObjectIdentifier>()

    init(label: String) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
        queue.setSpecific(key: Self.key, value: ObjectIdentifier(self))
    }

    /// Whether the caller runs on this queue (in one of its steps).
    var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.key) == ObjectIdentifier(self) }

    /// Runs `work` after everything queued before it; the caller goes on at once.
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// Runs `work` after everything queued before it and returns what it returned; the awaiting
    /// task is suspended meanwhile.
    func run<Result: Sendable>(_ work: @escaping @Sendable () -> Result) async -> Result {
        await withCheckedContinuation { (done: CheckedContinuation<Result, Never>) in
            queue.async { done.resume(returning: work()) }
        }
    }

    /// Runs `work` after everything queued before it, blocking the caller until it is done: for
    /// benchmarks and tests that measure or drive one step, never for an app's calls.
    func sync<Result>(_ work: () throws -> Result) rethrows -> Result {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return try queue.sync(execute: work)
    }

    /// As ``sync(_:)``, or at once when the caller already runs on this queue: for an app's
    /// synchronous call that a delegate told on this queue may make (it runs between two steps,
    /// never inside one).
    func syncOrHere<Result>(_ work: () throws -> Result) rethrows -> Result {
        if isCurrent { return try work() }
        return try queue.sync(execute: work)
    }
}

extension EngineQueue {
    /// Stops a debug build when the caller is not running on this queue: the engine's working
    /// state belongs to it alone. Nothing in a release build.
    @inline(__always)
    func assertOwner() {
        #if DEBUG
        dispatchPrecondition(condition: .onQueue(queue))
        #endif
    }
}

/// A state that belongs to one ``EngineQueue``: read and changed only by work running there, one
/// step at a time, so it needs no lock, and no change of it can come from two places. A debug build
/// stops at any access from elsewhere.
///
/// What other threads may know of it is `Status`: a few facts taken from the state after each
/// step that changed them, published under a lock that only readers and the owner's publishing
/// take.
final class QueueOwned<State, Status: Equatable & Sendable>: @unchecked Sendable {
    // Safe to mark unchecked: `state` and `lastStatus` are touched only on `queue` (asserted in
    // debug builds), which runs one step at a time; `published` is a lock.
    private var state: State
    private var lastStatus: Status
    /// Whether a step is running (debug builds): a step never starts inside another.
    private var inStep = false
    private let queue: EngineQueue
    private let status: (State) -> Status
    private let published: Mutex<Status>

    init(_ state: State, on queue: EngineQueue, status: @escaping (State) -> Status) {
        self.state = state
        self.queue = queue
        self.status = status
        lastStatus = status(state)
        published = Mutex(lastStatus)
    }

    /// Runs one step on the state; called on the owning queue only.
    func access<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        queue.assertOwner()
        #if DEBUG
        precondition(!inStep, "A step on an engine's state started inside another.")
        inStep = true
        defer { inStep = false }
        #endif
        defer {
            let now = status(state)
            if now != lastStatus {
                lastStatus = now
                published.withLock { $0 = now }
            }
        }
        return try body(&state)
    }

    /// The facts the last step published: for any thread.
    var current: Status { published.withLock { $0 } }
}
