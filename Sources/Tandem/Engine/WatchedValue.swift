import Synchronization

/// A value behind a lock that tasks can wait on: `wait(until:)` returns once the value satisfies a
/// condition, or at once when the waiting task is cancelled, so no wait outlives its task.
package final class WatchedValue<Value: Sendable>: Sendable {
    private struct Waiter {
        var ready: @Sendable (Value) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var value: Value
        var nextWaiter = 0
        var waiters: [Int: Waiter] = [:]
        /// Waiters cancelled before they parked: they do not park.
        var cancelledEarly: Set<Int> = []
    }

    private let state: Mutex<State>

    package init(_ value: Value) {
        state = Mutex(State(value: value))
    }

    package var value: Value { state.withLock { $0.value } }

    /// Changes the value and wakes whoever waits for what it became.
    package func update(_ change: (inout Value) -> Void) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            change(&state.value)
            let value = state.value
            let ids = state.waiters.filter { $0.value.ready(value) }.keys
            return ids.compactMap { state.waiters.removeValue(forKey: $0)?.continuation }
        }
        ready.forEach { $0.resume() }
    }

    /// Returns once the value satisfies `ready`, or when the task is cancelled.
    package func wait(until ready: @escaping @Sendable (Value) -> Bool) async {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if ready(state.value) || state.cancelledEarly.remove(id) != nil { return true }
                    state.waiters[id] = Waiter(ready: ready, continuation: continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                state.cancelledEarly.insert(id)
                return nil
            }
            waiter?.continuation.resume()
        }
    }
}
