import TandemCore

/// The limits a server enforces, with Firestore-like defaults. Past a limit a request gets a
/// `resource-exhausted` (or `invalid-argument`) error, and nothing is written.
public struct ServerLimits: Sendable, Hashable {
    /// The largest document body, as compact JSON text. Default 1 MiB.
    public var maximumDocumentBytes = 1 << 20
    /// The largest request or message. Default 10 MiB.
    public var maximumRequestBytes = 10 << 20
    /// The most writes in one batch. Default 500.
    public var maximumBatchWrites = 500
    /// The most segments in a path. Default 100, the most paths may have.
    public var maximumPathDepth = PathRules.maximumDepth
    /// The most writes (mutations) one WebSocket connection may send per second, on average; up to
    /// a second's worth may come at once. Past it a write request is answered `resource-exhausted`
    /// with `retryAfter` (nothing written), which `TandemClient` waits out before sending it again.
    /// Default 5,000.
    public var maximumWritesPerSecond = 5_000
    /// The most writes one signed-in user may send per second over all their connections and HTTP
    /// requests, answered as above; anonymous callers' writes count against their address (an IPv6
    /// address by its /64), at the same rate. Default 10,000.
    public var maximumWritesPerSecondPerUser = 10_000
    /// The most messages (of any kind) one WebSocket connection may send per second, on average;
    /// past it a message is answered `resource-exhausted` with `retryAfter`, and not acted on.
    /// Default 10,000.
    public var maximumMessagesPerSecond = 10_000
    /// The most WebSocket connections one signed-in user may have open at once; past it `hello` is
    /// refused with `resource-exhausted`. Default 100.
    public var maximumConnectionsPerUser = 100
    /// The most anonymous WebSocket connections one address (an IPv6 address: its /64) may have
    /// open at once (an anonymous caller has no user to count them by); past it `hello` is refused
    /// with `resource-exhausted`. Higher than the per-user limit, since many devices may share an
    /// address. Default 1,000.
    public var maximumConnectionsPerAddress = 1_000
    /// How deep arrays and objects may nest in a request or message, the envelope included; deeper
    /// is refused with `invalid-argument` before anything of it is used. Default 64; at most
    /// `JSONText.maximumDepth` (256), which the parser never exceeds.
    public var maximumJSONDepth = 64

    /// The most listeners one connection may run at once. Default 1,000.
    public var maximumListenersPerConnection = 1_000
    /// The most write requests one connection may have waiting to commit; past it a write is
    /// answered `unavailable` at once (nothing written). Default 1,000.
    public var maximumPendingWritesPerConnection = 1_000
    /// The most reads (`get`, `query` and `fetch`) one WebSocket connection may have under way at
    /// once; past it a read is answered `resource-exhausted` with `retryAfter` (250 ms) at once,
    /// not acted on, and the connection goes on. `TandemClient` waits it out and sends the read
    /// again. Default 100.
    public var maximumReadsInFlightPerConnection = 100
    /// The most reads one signed-in user may send per second over HTTP (`GET /v1/documents/…`,
    /// `POST /v1/query`, `GET /v1/changes`, `GET /v1/collections`, `GET /v1/groups`), on average;
    /// up to a second's worth may come at once. Anonymous callers' reads count against their
    /// address (an IPv6 address by its /64), at the same rate. Past it a read is answered `429`
    /// with `Retry-After` (`resource-exhausted` with `retryAfter`). Default 10,000.
    public var maximumHTTPReadsPerSecondPerUser = 10_000

    /// The default limits, as each property states.
    public init() {}

    /// Throws `resource-exhausted` when a document body is larger than allowed.
    public func checkDocument(_ data: JSONObject, at path: DocumentPath) throws(TandemError) {
        try checkDocument(encoded: JSONText.encode(data), at: path)
    }

    /// As ``checkDocument(_:at:)``, for data already encoded as compact JSON text.
    package func checkDocument(encoded text: String, at path: DocumentPath) throws(TandemError) {
        let size = text.utf8.count
        if size > maximumDocumentBytes {
            throw TandemError(.resourceExhausted, "The document \(path) is \(size) bytes; at most \(maximumDocumentBytes) are allowed. Split it into smaller documents.")
        }
    }

    /// Throws when a batch has too many writes, or a path is too deep.
    public func checkBatch(_ mutations: [Mutation]) throws(TandemError) {
        if mutations.count > maximumBatchWrites {
            throw TandemError(.resourceExhausted, "The batch has \(mutations.count) writes; at most \(maximumBatchWrites) are allowed. Split it into several batches.")
        }
        for mutation in mutations where mutation.path.segments.count > maximumPathDepth {
            throw TandemError.invalidArgument("The path \(mutation.path) has \(mutation.path.segments.count) segments; this server allows at most \(maximumPathDepth).")
        }
    }
}
