import Synchronization

/// A value behind a lock, shared between tasks and `@Sendable` closures: a test's injected time,
/// a count an observer keeps, samples a benchmark gathers.
public final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    public init(_ value: Value) { mutex = Mutex(value) }

    /// The value now; setting it replaces it under the lock.
    public var value: Value {
        get { mutex.withLock { $0 } }
        set { mutex.withLock { $0 = newValue } }
    }

    /// Reads or changes the value under the lock.
    public func withLock<Result: Sendable, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        try mutex.withLock { value throws(Failure) in try body(&value) }
    }
}
