import Synchronization

/// Released engines still running the steps asked of them before they went, by `managerKey`.
///
/// An engine that goes runs what was asked of it first (a stop and its cache dropped, a listener
/// batch, its cache writer's queue), on its own queue, after its owner let go. A new engine of the
/// same key loads its persistence only once those have run and are on disk: the two never write
/// one persistence at once, so the last one's documents and resume point are never interleaved
/// with the other's (a resume point left by one beside documents the other had dropped made a
/// view that stayed short for good).
///
/// One live engine per storage (the same SQLite file and key, or the same document file): a new
/// engine takes the storage over from an engine on it that the app still holds (a view model made
/// again while a task keeps the old one). The old one is superseded (``arrive(_:on:supersede:)``):
/// it stops listening and sending, writes nothing more and refuses writes; then the new one loads.
enum EngineHandover {
    private static let leaving = Mutex<[String: [ObjectIdentifier: EngineQueue]]>([:])
    /// Engines alive now, by the storage they keep their state in (``EnginePersistence/storageName``),
    /// each with the call that supersedes it.
    private static let live = Mutex<[String: [ObjectIdentifier: LiveEngine]]>([:])

    /// An engine alive now: its queue, and what supersedes it.
    final class LiveEngine: Sendable {
        let supersede: @Sendable () -> Void
        init(_ supersede: @escaping @Sendable () -> Void) { self.supersede = supersede }
    }

    /// The engine on `queue` keeps its state in `storage` now; `supersede` is called (once) when
    /// a newer engine opens the same storage while it still lives.
    static func arrive(_ storage: String, on queue: EngineQueue, supersede: @escaping @Sendable () -> Void) {
        live.withLock { $0[storage, default: [:]][ObjectIdentifier(queue)] = LiveEngine(supersede) }
    }

    /// Supersedes the engines alive in `storage`: each leaves (``leave(_:on:)``) before this returns.
    static func supersede(in storage: String) {
        let superseded = live.withLock { $0.removeValue(forKey: storage).map { Array($0.values) } ?? [] }
        for engine in superseded { engine.supersede() }
    }

    /// The engine on `queue` is no longer live anywhere (released or superseded).
    static func gone(_ queue: EngineQueue) {
        live.withLock { live in
            for key in Array(live.keys) {
                live[key]?.removeValue(forKey: ObjectIdentifier(queue))
                if live[key]?.isEmpty == true { live.removeValue(forKey: key) }
            }
        }
    }
    /// Called when a new engine starts waiting for released ones (tests).
    private static let waitHook = Mutex<WaitHook?>(nil)

    /// Boxed: a closure kept in a `Mutex` directly is thunked again on every access.
    final class WaitHook: Sendable {
        let body: @Sendable (String) -> Void
        init(_ body: @escaping @Sendable (String) -> Void) { self.body = body }
    }

    /// The engine on `queue` was released; ``left(_:from:)`` follows when its last step has run.
    static func leave(_ key: String, on queue: EngineQueue) {
        gone(queue)
        leaving.withLock { $0[key, default: [:]][ObjectIdentifier(queue)] = queue }
    }

    /// The engine on `queue` ran its last step, and its writes are on disk.
    static func left(_ key: String, from queue: EngineQueue) {
        leaving.withLock { leaving in
            leaving[key]?.removeValue(forKey: ObjectIdentifier(queue))
            if leaving[key]?.isEmpty == true { leaving.removeValue(forKey: key) }
        }
    }

    /// Blocks until every engine of `key` released before now has run its last step. A new
    /// engine's initializer calls it before it loads its cache (a wait of the steps the old one
    /// had left, usually none).
    static func waitForLeaving(_ key: String) {
        let queues = leaving.withLock { Array(($0[key] ?? [:]).values) }
        guard !queues.isEmpty else { return }
        waitHook.withLock { $0 }?.body(key)
        // From a step of the engine that leaves (an observer making the next one), there is
        // nothing to wait for: its steps run after this one.
        for queue in queues where !queue.isCurrent { queue.sync {} }
    }

    /// Calls `body` with the key each time a new engine waits for released ones (nil: nothing).
    package static func onWait(_ body: (@Sendable (String) -> Void)?) {
        waitHook.withLock { $0 = body.map(WaitHook.init) }
    }
}
