import Synchronization

/// A value behind a lock, shared between tasks and `@Sendable` closures: a test's injected time,
/// a count an observer keeps, samples a benchmark gathers. A test awaits a state of it with
/// ``wait(until:)`` instead of polling.
///
/// ```swift
/// let seen = Locked<[String]>([])
/// // … a listener appends to it …
/// await seen.wait { $0.count == 3 }
/// ```
public final class Locked<Value: Sendable>: Sendable {
    private struct Waiter {
        let ready: @Sendable (Value) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var value: Value
        var waiters: [Int: Waiter] = [:]
        var nextWaiter = 0
        var cancelledEarly: Set<Int> = []
    }

    private let mutex: Mutex<State>

    /// A lock around `value`.
    public init(_ value: Value) { mutex = Mutex(State(value: value)) }

    /// The value now; setting it replaces it under the lock.
    public var value: Value {
        get { mutex.withLock { $0.value } }
        set { withLock { $0 = newValue } }
    }

    /// Reads or changes the value under the lock; whoever waits for the state it leaves is woken.
    public func withLock<Result: Sendable, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        let (result, ready) = try mutex.withLock { state throws(Failure) -> (Result, [CheckedContinuation<Bool, Never>]) in
            let result = try body(&state.value)
            guard !state.waiters.isEmpty else { return (result, []) }
            let value = state.value
            let ids = state.waiters.filter { $0.value.ready(value) }.keys
            return (result, ids.compactMap { state.waiters.removeValue(forKey: $0)?.continuation })
        }
        ready.forEach { $0.resume(returning: true) }
        return result
    }

    /// Returns true once the value satisfies `ready`: checked now and after each change. Returns
    /// false when the task is cancelled first (a test's time limit), so a state that never comes
    /// fails the test instead of hanging the run.
    @discardableResult
    public func wait(until ready: @escaping @Sendable (Value) -> Bool) async -> Bool {
        let id = mutex.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now = mutex.withLock { state -> Bool? in
                    if ready(state.value) { return true }
                    if state.cancelledEarly.remove(id) != nil { return false }
                    state.waiters[id] = Waiter(ready: ready, continuation: continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = mutex.withLock { state -> Waiter? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                state.cancelledEarly.insert(id)
                return nil
            }
            waiter?.continuation.resume(returning: false)
        }
    }
}
