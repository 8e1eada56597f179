import Synchronization

/// A clock that moves only when a test says so. Code under test takes a `Clock` and sleeps on it;
/// the test advances time and awaits what happens, never sleeping on the wall clock.
///
/// ```swift
/// let clock = ManualClock()
/// let retry = Task { try await clock.sleep(for: .seconds(2)); return "retried" }
/// await clock.waitForSleepers(count: 1)   // the task is now waiting on the clock
/// clock.advance(by: .seconds(2))
/// #expect(try await retry.value == "retried")
/// ```
public final class ManualClock: Clock, Sendable {
    /// A point on the manual clock: a duration since its start.
    public struct Instant: InstantProtocol, Sendable, Hashable, Comparable, CustomStringConvertible {
        /// The time since the clock's start.
        public var offset: Duration

        /// The instant `offset` after the clock's start (the start itself by default).
        public init(offset: Duration = .zero) { self.offset = offset }

        /// The instant `duration` later (earlier, for a negative duration).
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`; negative when `other` is earlier.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
        public var description: String { "\(offset)" }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant()
        var nextID = 0
        var sleepers: [Int: Sleeper] = [:]
        var cancelledBeforeSleeping: Set<Int> = []
        var sleeperWaiters: [(ready: @Sendable ([Instant]) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())

    /// A clock at its start, `Instant(offset: .zero)`, with nothing sleeping.
    public init() {}

    /// The current instant; it moves only with `advance(by:)` and `advance(to:)`.
    public var now: Instant { state.withLock { $0.now } }
    /// Zero: a deadline is met exactly when time reaches it.
    public var minimumResolution: Duration { .zero }

    /// How many tasks are sleeping on the clock now.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The deadlines of the tasks sleeping now, earliest first.
    public var pendingDeadlines: [Instant] { state.withLock { $0.sleepers.values.map(\.deadline).sorted() } }

    /// Suspends until time is advanced to `deadline`, returning at once when it is reached already;
    /// `tolerance` is ignored. Throws `CancellationError` when the task is cancelled, before or
    /// while it sleeps.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Outcome { case slept, resumeNow, cancelled }
                var waitersToResume: [CheckedContinuation<Void, Never>] = []
                let outcome = state.withLock { state -> Outcome in
                    if state.cancelledBeforeSleeping.remove(id) != nil { return .cancelled }
                    if deadline <= state.now { return .resumeNow }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    let deadlines = state.sleepers.values.map(\.deadline).sorted()
                    state.sleeperWaiters.removeAll { waiter in
                        guard waiter.ready(deadlines) else { return false }
                        waitersToResume.append(waiter.continuation)
                        return true
                    }
                    return .slept
                }
                // Continuations are resumed outside the lock.
                waitersToResume.forEach { $0.resume() }
                switch outcome {
                case .slept: break
                case .resumeNow: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                if let sleeper = state.sleepers.removeValue(forKey: id) { return sleeper }
                state.cancelledBeforeSleeping.insert(id)
                return nil
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward, waking every sleeper whose deadline is reached, earliest first.
    public func advance(by duration: Duration) {
        advance(to: now.advanced(by: duration))
    }

    /// Moves time to an instant (never backwards), waking every sleeper whose deadline is reached.
    public func advance(to instant: Instant) {
        let due = state.withLock { state -> [Sleeper] in
            state.now = max(state.now, instant)
            let now = state.now
            let dueIDs = state.sleepers.filter { $0.value.deadline <= now }.keys
            return dueIDs.compactMap { state.sleepers.removeValue(forKey: $0) }.sorted { $0.deadline < $1.deadline }
        }
        due.forEach { $0.continuation.resume() }
    }

    /// Returns once at least `count` tasks are sleeping on the clock: the event to await before
    /// advancing time, instead of sleeping on the wall clock.
    public func waitForSleepers(count: Int = 1) async {
        await waitForSleepers { $0.count >= count }
    }

    /// Returns once the deadlines of the tasks sleeping on the clock (earliest first) satisfy
    /// `ready` — say, once one sleeps until a given instant — checked now and whenever a task
    /// starts to sleep.
    ///
    /// ```swift
    /// await clock.waitForSleepers { $0.contains(clock.now.advanced(by: .seconds(10))) }
    /// ```
    public func waitForSleepers(matching ready: @escaping @Sendable ([Instant]) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if ready(state.sleepers.values.map(\.deadline).sorted()) { return true }
                state.sleeperWaiters.append((ready, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}
