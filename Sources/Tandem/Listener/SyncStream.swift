import Synchronization

/// A sequence of an engine's updates. Nothing starts when it is made: each iteration starts its
/// own source (a listener on the server, or an observation of the engine) when its iterator is
/// made, and stops it when the iterator is dropped or its task is cancelled.
///
/// ```swift
/// let reviews = engine.streamCollection { $0.whereField("rating", isGreaterThan: 3) }  // nothing runs yet
/// for try await page in reviews {        // the listener starts here…
///     if page.count > 10 { break }       // …and stops here
/// }
/// ```
public struct SyncStream<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = any Error

    private let start: @Sendable () -> any SyncStreamSource<Element>

    init(_ start: @escaping @Sendable () -> any SyncStreamSource<Element>) {
        self.start = start
    }

    /// A sequence whose every iteration runs a stream that `make` builds then.
    init(stream make: @escaping @Sendable () -> AsyncThrowingStream<Element, any Error>) {
        self.init { StreamSource(make()) }
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(source: start())
    }

    /// Owns its source: dropping the iterator stops it.
    public struct Iterator: AsyncIteratorProtocol {
        let source: any SyncStreamSource<Element>

        public mutating func next() async throws -> Element? {
            try await source.next()
        }
    }
}

/// What one iteration of a ``SyncStream`` reads from; it stops what it started when it goes.
protocol SyncStreamSource<Element>: AnyObject {
    associatedtype Element
    func next() async throws -> Element?
}

/// A source over a stream: dropping it ends the stream, whose termination stops its listener.
final class StreamSource<Element>: SyncStreamSource {
    private var iterator: AsyncThrowingStream<Element, any Error>.Iterator

    init(_ stream: AsyncThrowingStream<Element, any Error>) {
        iterator = stream.makeAsyncIterator()
    }

    func next() async throws -> Element? {
        try await iterator.next()
    }
}

/// A source over an engine's changes: each signal reads the engine's state as it is then, so a
/// slow reader skips states instead of piling them up. The first call reads at once.
final class ObservationSource<Element>: SyncStreamSource {
    /// What a read found.
    enum Read {
        case element(Element)
        /// Nothing it reports changed since the last element.
        case unchanged
        /// The engine is gone: the sequence ends.
        case finished
    }

    private var signals: AsyncStream<Void>.Iterator
    private let read: () -> Read
    private let stop: @Sendable () -> Void

    /// - Parameters:
    ///   - observe: registers a change handler and returns what removes it.
    ///   - read: the next element, if any.
    init(observe: (@escaping @Sendable () -> Void) -> @Sendable () -> Void, read: @escaping () -> Read) {
        let (signals, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        signal.yield()
        let remove = observe { signal.yield() }
        self.signals = signals.makeAsyncIterator()
        self.read = read
        stop = {
            remove()
            signal.finish()
        }
    }

    deinit {
        stop()
    }

    func next() async -> Element? {
        while await signals.next() != nil {
            if Task.isCancelled { return nil }
            switch read() {
            case .element(let element): return element
            case .unchanged: continue
            case .finished: return nil
            }
        }
        return nil
    }
}

/// An engine's states, one after each change, as a sequence that never fails:
/// `for await snapshot in engine.snapshots()` works as it is in a SwiftUI `.task`. Nothing runs
/// until it is iterated; each iteration observes the engine from then on, reads its state at once,
/// and ends when the engine goes or the task is cancelled. A slow reader skips states rather than
/// piling them up.
public struct SnapshotSequence<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = Never

    private let start: @Sendable () -> ObservationSource<Element>

    init(_ start: @escaping @Sendable () -> ObservationSource<Element>) {
        self.start = start
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(source: start())
    }

    /// Owns its observation: dropping the iterator ends it.
    public struct Iterator: AsyncIteratorProtocol {
        let source: ObservationSource<Element>

        public mutating func next() async -> Element? {
            await source.next()
        }
    }
}
