import Synchronization
import TandemCore

/// The server's admission step: every limit and quota a request must pass before anything acts on
/// it, decided here for HTTP and the WebSocket alike, for signed-in and anonymous callers alike.
///
/// | Checked | Counted per | Limit (``ServerLimits``) | Refused with |
/// |---|---|---|---|
/// | a message's or body's size, before it is parsed | request | `maximumRequestBytes` | `resource-exhausted` |
/// | messages a second, before the message is parsed | connection | `maximumMessagesPerSecond` | `resource-exhausted` + `retryAfter` |
/// | open WebSocket connections, at `hello` | user, or an anonymous caller's address | `maximumConnectionsPerUser`, `maximumConnectionsPerAddress` | `resource-exhausted` |
/// | writes a second | connection, and user or anonymous address | `maximumWritesPerSecond`, `maximumWritesPerSecondPerUser` | `resource-exhausted` + `retryAfter` |
/// | write requests waiting to commit | connection | `maximumPendingWritesPerConnection` | `unavailable` |
/// | reads (`get`, `query`, `fetch`) under way on a WebSocket | connection | `maximumReadsInFlightPerConnection` | `resource-exhausted` + `retryAfter` |
/// | HTTP reads a second | user, or anonymous address | `maximumHTTPReadsPerSecondPerUser` | `resource-exhausted` + `retryAfter` (429) |
/// | writes in a request, path depth | request | `maximumBatchWrites`, `maximumPathDepth` | `resource-exhausted`, `invalid-argument` |
/// | listeners running | connection | `maximumListenersPerConnection` | `resource-exhausted` |
///
/// The cheap checks come first: a WebSocket message's size and its connection's rate are checked
/// on its bytes, before its JSON is parsed, and a refusal answers the request id read from its first
/// bytes. Nesting depth (`maximumJSONDepth`) is enforced by the parser as it reads. A document's size
/// (`maximumDocumentBytes`) is checked inside the commit, on the document the write leaves, where
/// its refusal reads the same as an access refusal.
///
/// An anonymous caller has no user to count against, so its quotas count against its address: many
/// connections or HTTP requests from one address share one connection count, one write bucket and
/// one read bucket. An IPv6 address counts by its /64 (see ``Caller``).
///
/// The rate buckets of at most ``maximumTrackedCallers`` callers are kept; past it the least
/// recently seen caller's bucket is forgotten (``LRUTable``), so a crowd of new callers never
/// refills the buckets of the callers busy now.
final class Admission: Sendable {
    /// A connection counted against its caller, from ``seat(_:)``: given back once with
    /// ``release(_:)``.
    struct Seat: Sendable, Hashable {
        let caller: Caller
    }

    /// What one WebSocket connection counts of its own; kept by its session, passed in here.
    struct ConnectionCounters: Sendable {
        var messages: RateLimiter
        /// The order and rate of the connection's writes (see ``WriteSequencer``).
        var writes: WriteSequencer
        /// Reads admitted by ``Admission/admitRead(on:)`` and not yet ended.
        var readsInFlight = 0

        init(limits: ServerLimits) {
            messages = RateLimiter(perSecond: limits.maximumMessagesPerSecond)
            writes = WriteSequencer(limits: limits)
        }
    }

    private struct State {
        var connections: [Caller: Int] = [:]
        var writes = LRUTable<Caller, RateLimiter>(capacity: Admission.maximumTrackedCallers)
        var reads = LRUTable<Caller, RateLimiter>(capacity: Admission.maximumTrackedCallers)
    }

    let limits: ServerLimits
    private let now: @Sendable () -> Duration
    private let state = Mutex(State())
    /// The most callers whose write buckets (and, apart, read buckets) are kept; past it the least
    /// recently seen caller's bucket is forgotten, to start full again if it comes back (at most a
    /// second's worth more for it), so the tables never grow without bound.
    static let maximumTrackedCallers = 65_536
    /// How long a read refused for its connection's reads in flight is told to wait: a few reads'
    /// time, after which some of those under way have been answered.
    static let readsInFlightRetryAfter = Duration.milliseconds(250)

    init(limits: ServerLimits, now: @escaping @Sendable () -> Duration) {
        self.limits = limits
        self.now = now
    }

    // MARK: Messages

    /// The size of a message or body, before it is parsed.
    func checkRequestSize(_ bytes: Int) throws(TandemError) {
        if bytes > limits.maximumRequestBytes {
            throw TandemError(.resourceExhausted, "The request is \(bytes) bytes; at most \(limits.maximumRequestBytes) are allowed. Send smaller batches.")
        }
    }

    /// A WebSocket message of `bytes` bytes arrives on a connection, before it is parsed: its size,
    /// then the connection's message rate. Nil when it may be read.
    func admitMessage(bytes: Int, on connection: inout ConnectionCounters) -> TandemError? {
        do throws(TandemError) {
            try checkRequestSize(bytes)
        } catch {
            return error
        }
        guard !connection.messages.admit(1, at: now()) else { return nil }
        let wait = connection.messages.wait(for: 1)
        return TandemError(.resourceExhausted, "This connection sent more than \(limits.maximumMessagesPerSecond) messages a second; this one was not acted on. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again.",
                           retryAfter: wait)
    }

    // MARK: Connections

    /// Counts a WebSocket connection of `principal` against its caller, at `hello`; refused with
    /// `resource-exhausted` when the caller has the most allowed open already. Nil when there is
    /// no one to count it against (an anonymous connection with no address, in process).
    func seat(_ principal: Principal) throws(TandemError) -> Seat? {
        guard let caller = principal.caller else { return nil }
        let limit: Int
        switch caller {
        case .user: limit = limits.maximumConnectionsPerUser
        case .address: limit = limits.maximumConnectionsPerAddress
        }
        let admitted = state.withLock { state -> Bool in
            let open = state.connections[caller, default: 0]
            guard open < limit else { return false }
            state.connections[caller] = open + 1
            return true
        }
        guard admitted else {
            throw TandemError(.resourceExhausted, "\(caller) has \(limit) connections open, the most allowed; close one before opening another.")
        }
        return Seat(caller: caller)
    }

    /// A connection counted by ``seat(_:)`` closed.
    func release(_ seat: Seat) {
        state.withLock { state in
            let open = state.connections[seat.caller, default: 0] - 1
            state.connections[seat.caller] = open > 0 ? open : nil
        }
    }

    /// How many connections `caller` has open.
    func openConnections(of caller: Caller) -> Int {
        state.withLock { $0.connections[caller, default: 0] }
    }

    // MARK: Writes

    /// A write request arrives on a WebSocket connection: its size (as a batch, or mutation by
    /// mutation with `each`), the connection's order, queue and rate, then its caller's rate.
    /// `.proceed` admits it to the connection's write queue.
    func admitWrites(_ mutations: [Mutation], each: Bool, from principal: Principal, on connection: inout ConnectionCounters) -> WriteSequencer.Decision {
        if each, mutations.count > limits.maximumBatchWrites {
            return .refuse(TandemError(.resourceExhausted, "The write has \(mutations.count) mutations; at most \(limits.maximumBatchWrites) are allowed in one request. Send them in several."))
        }
        let decision = connection.writes.arrive(mutations, at: now())
        guard decision == .proceed, let refusal = admitWrites(max(1, mutations.count), from: principal) else { return decision }
        // Admitted by the connection, refused by its caller's rate: its writers' later writes wait for it.
        connection.writes.withdraw(mutations)
        return .refuse(refusal)
    }

    /// Takes `count` writes from the bucket of `principal`'s caller (its user, or an anonymous
    /// caller's address); the refusal (with `retryAfter`) when there are not enough. Nil when
    /// admitted, or when there is no one to count them against.
    func admitWrites(_ count: Int, from principal: Principal) -> TandemError? {
        guard let caller = principal.caller else { return nil }
        return admitWrites(count, for: caller)
    }

    /// As above, for a caller.
    func admitWrites(_ count: Int, for caller: Caller) -> TandemError? {
        let now = now()
        let limit = limits.maximumWritesPerSecondPerUser
        let wait = state.withLock { state in state.writes.take(count, by: caller, at: now, perSecond: limit) }
        guard let wait else { return nil }
        return TandemError(.resourceExhausted, "\(caller) sent more than \(limit) writes a second; nothing was written. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again.",
                           retryAfter: wait)
    }

    /// A write request's own shape: how many writes it holds, how deep its paths go.
    func checkBatch(_ mutations: [Mutation]) throws(TandemError) {
        try limits.checkBatch(mutations)
    }

    // MARK: Reads

    /// A read (`get`, `query` or `fetch`) arrives on a WebSocket connection, which runs each in a
    /// task of its own: counted in flight until ``readEnded(on:)``. Refused at once, with
    /// `resource-exhausted` and `retryAfter`, when the connection has
    /// `maximumReadsInFlightPerConnection` reads under way already; the connection goes on. Nil
    /// when admitted.
    func admitRead(on connection: inout ConnectionCounters) -> TandemError? {
        let limit = limits.maximumReadsInFlightPerConnection
        guard connection.readsInFlight >= limit else {
            connection.readsInFlight += 1
            return nil
        }
        let wait = Self.readsInFlightRetryAfter
        return TandemError(.resourceExhausted, "This connection has \(limit) reads under way, the most allowed; this one was not read. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again, or wait for answers before sending more reads.",
                           retryAfter: wait)
    }

    /// A read admitted by ``admitRead(on:)`` ended: answered, failed, or cancelled.
    func readEnded(on connection: inout ConnectionCounters) {
        connection.readsInFlight = max(0, connection.readsInFlight - 1)
    }

    /// An HTTP read (a document, a query, a page of changes, a listing) arrives from `principal`:
    /// one read from the bucket of its caller (its user, or an anonymous caller's address); the
    /// refusal (with `retryAfter`, answered 429) when the bucket is empty. Nil when admitted, or
    /// when there is no one to count it against.
    func admitRead(from principal: Principal) -> TandemError? {
        guard let caller = principal.caller else { return nil }
        return admitRead(for: caller)
    }

    /// As above, for a caller.
    func admitRead(for caller: Caller) -> TandemError? {
        let now = now()
        let limit = limits.maximumHTTPReadsPerSecondPerUser
        let wait = state.withLock { state in state.reads.take(1, by: caller, at: now, perSecond: limit) }
        guard let wait else { return nil }
        return TandemError(.resourceExhausted, "\(caller) sent more than \(limit) reads a second over HTTP; this one was not read. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send it again, or read over the WebSocket stream.",
                           retryAfter: wait)
    }

    // MARK: Listeners

    /// The most listeners one connection may run at once.
    var listenersPerConnection: Int { limits.maximumListenersPerConnection }
}

extension LRUTable where Value == RateLimiter {
    /// Takes `count` tokens from `key`'s bucket (a full one of `limit` a second when the table
    /// holds none for it); how long until there are enough when there are not, nil when taken.
    fileprivate mutating func take(_ count: Int, by key: Key, at now: Duration, perSecond limit: Int) -> Duration? {
        update(key, default: RateLimiter(perSecond: limit)) { bucket in
            bucket.admit(count, at: now) ? nil : bucket.wait(for: count)
        }
    }
}
