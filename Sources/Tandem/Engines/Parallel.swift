import Dispatch

/// Splits the work of a large batch across cores, and returns only once all of it is done.
enum Parallel {
    /// Runs `first` and `second` at the same time; returns when both have finished.
    static func both(_ first: () -> Void, _ second: () -> Void) {
        withoutActuallyEscaping(first) { first in
            withoutActuallyEscaping(second) { second in
                let work = Unchecked((first, second))
                DispatchQueue.concurrentPerform(iterations: 2) { index in
                    if index == 0 { work.value.0() } else { work.value.1() }
                }
            }
        }
    }
}

/// Carries a value into `concurrentPerform`'s closure.
///
/// Safe here because `concurrentPerform` returns only after every iteration finished, so nothing
/// outlives the call, and the iterations share only what they read: the closures `both` runs
/// touch disjoint state (the caller's contract).
private struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
