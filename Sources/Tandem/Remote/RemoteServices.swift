import Synchronization
import TandemCore

/// The server side of a `CollectionSyncEngine`: one collection, read, listened to, and written.
///
/// The collection path is re-read on every call (it may follow the signed-in user); when it is not
/// available, calls throw `TandemError` `unavailable` and streams end with it.
public protocol RemoteCollectionService: ReachabilityReporting {
    /// The collection now, or an `unavailable` error.
    func collectionPath() throws -> CollectionPath
    /// The documents matching a query, fetched once.
    func getDocuments(query: Query) async throws -> [Document]
    /// One document, or nil.
    func getDocument(id: String) async throws -> Document?
    /// A snapshot of the query's documents, then each commit that changes them. With `resumeFrom`,
    /// only what changed after that version (or a new snapshot when the server cannot tell).
    func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>
    /// One document's state, then each commit that changes it.
    func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>
    /// Applies writes atomically, each at most once by its `MutationID`. A write already applied is
    /// answered with its original acknowledgement.
    func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement]
    /// Sends several write requests in order without waiting between them, and answers each (see
    /// ``TandemClient/commit(requests:)``). The default sends them one after another with
    /// ``commit(_:)``; a request after one that failed for a passing reason is not sent and fails
    /// with `aborted`.
    func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
}

extension RemoteCollectionService {
    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        await SequentialWrites.send(requests) { try await commit($0) }
    }
}

/// The server side of a `DocumentSyncEngine`: documents of one collection, addressed by id.
public protocol RemoteDocumentService: ReachabilityReporting {
    /// The collection now, or an `unavailable` error.
    func collectionPath() throws -> CollectionPath
    /// One document, or nil.
    func getDocument(id: String) async throws -> Document?
    /// The document's state, then each commit that changes it.
    func listen(documentID: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>
    /// Applies writes atomically, each at most once by its `MutationID`.
    func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement]
    /// Sends several write requests in order; as ``RemoteCollectionService/commit(requests:)``.
    func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>]
}

extension RemoteDocumentService {
    public func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] {
        await SequentialWrites.send(requests) { try await commit($0) }
    }
}

/// Write requests sent one after another over a remote that takes one at a time, with the
/// answers a pipelining server would give.
enum SequentialWrites {
    static func send(
        _ requests: [WriteRequest], commit: ([Mutation]) async throws -> [WriteAcknowledgement]
    ) async -> [Result<[WriteAcknowledgement], any Error>] {
        var results: [Result<[WriteAcknowledgement], any Error>] = []
        var stopped: (any Error)?
        for request in requests {
            if let stopped {
                results.append(.failure(TandemError(.aborted, "Not sent: a write sent before it failed (\(stopped)); send that one and this one again, in order.")))
                continue
            }
            if request.isAtomic {
                do {
                    results.append(.success(try await commit(request.mutations)))
                } catch {
                    results.append(.failure(error))
                    if !TandemError.isPermanent(error) { stopped = error }
                }
                continue
            }
            var acknowledgements: [WriteAcknowledgement] = []
            for mutation in request.mutations {
                do {
                    acknowledgements += try await commit([mutation])
                } catch let error as TandemError where error.isPermanent {
                    acknowledgements.append(.refused(mutation.id, error, at: .zero))
                } catch {
                    stopped = error
                    break
                }
            }
            results.append(stopped.map { .failure($0) } ?? .success(acknowledgements))
        }
        return results
    }
}

/// The server side of a `CollectionGroupSyncEngine`: every collection with one name, read-only.
public protocol RemoteCollectionGroupService: ReachabilityReporting {
    /// The collection-group name, such as `reviews`.
    var groupName: String { get }
    /// The documents matching a query across the group, fetched once.
    func getDocuments(query: Query) async throws -> [Document]
    /// A snapshot of the query's documents across the group, then each commit that changes them.
    func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>
}

/// A change of a remote's connection to the server.
public enum ConnectionEvent: Sendable, Hashable {
    /// The connection is down: listens and requests fail until it is back. The remote reconnects
    /// on its own.
    case disconnected
    /// The connection is up again: listeners may attach and writes may go.
    case resumed
}

/// Lets a remote tell its engine when its connection goes and comes back. An engine that hears
/// `disconnected` stops retrying on its own backoff and waits: its listener attaches again, and its
/// outbox is sent, as soon as `resumed` comes. The remote's reconnection is the only retry loop.
public protocol ReachabilityReporting: Sendable {
    /// Calls `handler` with each change of the connection until the observation is cancelled or
    /// freed; `disconnected` at once when the connection is down now. Nil when the remote cannot
    /// tell: its engine then retries on its backoff alone.
    func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation?

    /// Calls `handler` with each change of who the remote is signed in as, with the state now
    /// first, until the observation is cancelled or freed. Nil when the remote has no sign-in to
    /// follow. An engine that hears `signedOut` detaches its listener and holds its outbox, as
    /// when the connection is down; `signedIn` again, it attaches once and sends.
    func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation?

    /// Where the remote's engine reports its outbox's depth and the writes refused to it (nil:
    /// nowhere). The `TandemRemote…Service`s give their client's ``TandemClientConfiguration/metrics``.
    var metrics: ClientMetrics? { get }

    /// Asks a connection that is down to try again now, if it is waiting out a backoff: the engine
    /// calls it when a write or a read is made while ``observeConnection(_:)`` said the connection
    /// is down, instead of sending what could only fail; the `resumed` event then sends.
    func wakeConnection()
}

extension ReachabilityReporting {
    /// A remote that cannot tell: its engine retries on its backoff alone.
    public func observeConnection(_ handler: @escaping @Sendable (ConnectionEvent) -> Void) -> ConnectionObservation? { nil }

    /// A remote with no sign-in to follow.
    public func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation? { nil }

    /// A remote whose engine reports no metrics.
    public var metrics: ClientMetrics? { nil }

    /// A remote with no connection to wake: nothing.
    public func wakeConnection() {}
}

/// A registration for connection events: cancelling it (or freeing it) stops the calls.
public final class ConnectionObservation: Sendable {
    private let cancellation: Mutex<(@Sendable () -> Void)?>

    /// An observation that calls `cancel` once, when cancelled or freed.
    public init(cancel: @escaping @Sendable () -> Void) {
        cancellation = Mutex(cancel)
    }

    /// Stops the calls. Only the first cancellation does anything; freeing the observation after it
    /// does nothing more.
    public func cancel() {
        cancellation.withLock { cancel -> (@Sendable () -> Void)? in
            defer { cancel = nil }
            return cancel
        }?()
    }

    deinit { cancel() }
}
