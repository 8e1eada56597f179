/// The changes of one or more identity-map nodes as an `AsyncSequence`: the current value at once,
/// then one value per transaction that changes them.
///
/// Each iterator is its own subscription, holding its entities in the map until the iterator is
/// dropped or its task is cancelled.
public struct EntityObservation<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = Never

    let map: IdentityMap
    let keys: [NodeKey]
    /// Computes the value under the map's lock; nil skips a delivery.
    let current: @Sendable (IdentityMapStorage) -> Element?

    init(map: IdentityMap, keys: [NodeKey], current: @escaping @Sendable (IdentityMapStorage) -> Element?) {
        self.map = map
        self.keys = keys
        self.current = current
    }

    public func makeAsyncIterator() -> Iterator {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .unbounded)
        let id = map.makeSubscriberID()
        let map = self.map
        continuation.onTermination = { _ in map.unsubscribe(id: id) }
        let current = self.current
        map.subscribe(id: id, keys: keys) { storage in
            if let value = current(storage) { continuation.yield(value) }
        }
        return Iterator(base: stream.makeAsyncIterator())
    }

    /// One subscription's iterator: it holds the observed entities in the map until it is dropped
    /// or its task is cancelled.
    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncStream<Element>.Iterator

        public mutating func next() async -> Element? {
            await base.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            await base.next(isolation: actor)
        }
    }
}
