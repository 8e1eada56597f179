import Dispatch

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

    init(label: String) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
    }

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
}
