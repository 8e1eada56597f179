import Synchronization

/// A one-shot answer that may arrive before or after someone waits for it; the first answer stays.
package final class Ticket<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<Value, any Error>)
        case done(Result<Value, any Error>)
    }

    private let state = Mutex(State.empty)

    package init() {}

    package func value() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<Value, any Error>? in
                if case .done(let result) = state { return result }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    package func fulfill(_ result: Result<Value, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, any Error>? in
            switch state {
            case .done:
                return nil
            case .waiting(let continuation):
                state = .done(result)
                return continuation
            case .empty:
                state = .done(result)
                return nil
            }
        }
        // Never resume a continuation while holding a lock.
        waiter?.resume(with: result)
    }
}
