import Dispatch
import Synchronization

/// Writes an engine's changes to its persistence in the order they were made, some on a
/// background thread.
///
/// The server's state (a listener batch, an acknowledgement) needs no one to wait for the disk: if
/// the app stops first, the cache is an older, consistent state (each change is written whole,
/// with the version it reached), and acknowledged writes still in the outbox are sent again and
/// answered `replayed`. Those are queued with ``enqueue(_:)`` and written behind the caller's back.
/// A local write must be durable before its call returns: ``run(_:)`` writes every queued change
/// first, then it, on the caller's thread. Changes are queued on the engine's executor (``EngineQueue``), so
/// the queue's order is the order of the changes.
final class CacheWriter: Sendable {
    private struct Queue {
        var writes: [LocalWrite] = []
        var draining = false
    }

    private let queue = Mutex(Queue())
    /// Where ``start(_:)`` writes: a serial queue has a thread of its own to run on.
    private let writer = DispatchQueue(label: "tandem.cache-writer", qos: .userInitiated)
    /// Held while a change is written: the background drain and a caller's writes never overlap.
    private let writing = Mutex<Void>(())
    /// Told each failed write (logged as `persist_fail` by the engine).
    private let failed: @Sendable (any Error) -> Void

    init(failed: @escaping @Sendable (any Error) -> Void) {
        self.failed = failed
    }

    /// Queues a change no caller waits for; it is written after every change queued before it.
    func enqueue(_ write: LocalWrite) {
        if case .none = write { return }
        let start = queue.withLock { queue -> Bool in
            queue.writes.append(write)
            defer { queue.draining = true }
            return !queue.draining
        }
        if start { DispatchQueue.global().async { self.drain() } }
    }

    /// Writes every queued change, then `write`, on the caller's thread. Throws `write`'s error;
    /// a queued change that fails is told to `failed`.
    func run(_ write: LocalWrite) throws {
        try writing.withLock { _ in
            writeQueued()
            try write.run()
        }
    }

    /// Starts ``run(_:)`` on the writer's own thread and returns at once: the caller does its
    /// in-memory work while the disk syncs, then waits for the write with ``DiskWrite/wait()``.
    /// The caller must queue no other change before it waited (the engine's executor, blocked in
    /// its step until then).
    func start(_ write: LocalWrite) -> DiskWrite {
        if case .none = write { return DiskWrite(done: true) }
        let pending = DiskWrite(done: false)
        writer.async {
            do { try self.run(write) } catch { pending.fail(error) }
            pending.finish()
        }
        return pending
    }

    /// Writes every queued change now, on the caller's thread: before a change written another way
    /// (a large batch), and for tests that read the persistence.
    func flush() {
        writing.withLock { _ in writeQueued() }
    }

    /// Under `writing`.
    private func writeQueued() {
        let writes = queue.withLock { queue -> [LocalWrite] in
            defer { queue.writes = [] }
            return queue.writes
        }
        for write in writes {
            do { try write.run() } catch { failed(error) }
        }
    }

    private func drain() {
        while true {
            let more = writing.withLock { _ -> Bool in
                let next = queue.withLock { queue -> LocalWrite? in
                    guard !queue.writes.isEmpty else {
                        queue.draining = false
                        return nil
                    }
                    return queue.writes.removeFirst()
                }
                guard let next else { return false }
                do { try next.run() } catch { failed(error) }
                return true
            }
            if !more { return }
        }
    }
}

/// A local write under way on the cache writer's thread (``CacheWriter/start(_:)``).
final class DiskWrite: @unchecked Sendable {
    // Safe to mark unchecked: `error` is written once before `done` is signalled and read only
    // after waiting for it.
    private let done: DispatchSemaphore?
    private var error: (any Error)?

    init(done finished: Bool) {
        done = finished ? nil : DispatchSemaphore(value: 0)
    }

    fileprivate func fail(_ error: any Error) { self.error = error }

    fileprivate func finish() { done?.signal() }

    /// Blocks until the write is durable, or throws why it is not.
    func wait() throws {
        done?.wait()
        if let error { throw error }
    }
}
