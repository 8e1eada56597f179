import Dispatch

/// Splits the work of a large batch across cores, and returns only once all of it is done.
enum Parallel {
    /// Runs `first` on the calling thread (so on the engine's executor when called there, where
    /// its state may be touched) while `second` runs on another; returns when both have finished.
    /// `second` must touch nothing that belongs to the caller's executor.
    static func both(_ first: () -> Void, _ second: () -> Void) {
        withoutActuallyEscaping(second) { second in
            let work = Unchecked(second)
            let done = DispatchGroup()
            DispatchQueue.global(qos: .userInitiated).async(group: done) { work.value() }
            first()
            done.wait()
        }
    }
}

/// Carries the second closure to the thread that runs it.
///
/// Safe here because `both` returns only after that thread finished with it, so nothing outlives
/// the call, and the closures share only what they read (the caller's contract).
private struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
