import Logging
import Synchronization
import TandemCore

/// One client's WebSocket session: answers its requests, runs its listeners through the hub, and
/// checks every message it sends. Bad input gets an error frame answering it; the session goes on.
final class StreamSession: Sendable {
    let id: Int
    let outbox: SessionOutbox
    let hub: FanOutHub
    let store: any ServerStore
    let configuration: SyncServerConfiguration

    private struct State {
        var clientID: String?
        var listenIDs: Set<Int> = []
    }

    private let state = Mutex(State())
    /// Write requests received and not yet answered.
    private let pendingWrites = Atomic<Int>(0)
    /// Writes are committed one after another, in the order the client sent them.
    let writes: AsyncStream<(Int, [Mutation])>
    private let writesContinuation: AsyncStream<(Int, [Mutation])>.Continuation

    init(id: Int, hub: FanOutHub, store: any ServerStore, configuration: SyncServerConfiguration) {
        self.id = id
        self.hub = hub
        self.store = store
        self.configuration = configuration
        outbox = SessionOutbox(budget: configuration.maximumQueuedBytesPerConnection)
        (writes, writesContinuation) = AsyncStream.makeStream(of: (Int, [Mutation]).self)
    }

    /// Handles one text message; reads and listens run in `tasks`, writes go to the write queue.
    func handle(_ text: String, tasks: inout DiscardingTaskGroup) {
        if text.utf8.count > configuration.limits.maximumRequestBytes {
            outbox.send(.error(id: nil, TandemError(.resourceExhausted, "The message is \(text.utf8.count) bytes; at most \(configuration.limits.maximumRequestBytes) are allowed.")))
            return
        }
        let value: JSONValue
        do {
            value = try JSONText.parse(text)
        } catch {
            outbox.send(.error(id: nil, TandemError.invalidArgument("The message is not valid JSON: \(error.message)")))
            return
        }
        let message: ClientMessage
        do {
            message = try ClientMessage(wire: value)
        } catch {
            outbox.send(.error(id: ClientMessage.requestID(in: value), error))
            return
        }
        let helloDone = state.withLock { $0.clientID != nil }
        if !helloDone {
            guard case .hello = message else {
                outbox.send(.error(id: message.requestID, TandemError(.failedPrecondition, "Send hello (with your client id and protocol \(TandemVersion.wireProtocol)) before anything else.")))
                return
            }
        }
        switch message {
        case .hello(let clientID, let protocolVersion, _):
            guard protocolVersion == TandemVersion.wireProtocol else {
                outbox.send(.error(id: nil, TandemError(.failedPrecondition, "This server speaks protocol \(TandemVersion.wireProtocol), the client \(protocolVersion); upgrade the older side.")))
                return
            }
            state.withLock { $0.clientID = clientID }
            let seconds = Int(configuration.heartbeatInterval.components.seconds)
            outbox.send(.welcome(protocolVersion: TandemVersion.wireProtocol, serverVersion: TandemVersion.current, heartbeatSeconds: max(1, seconds)))
        case .heartbeat:
            outbox.send(.heartbeat)
        case .listen(let requestID, let target, let resumeFrom):
            let limit = configuration.limits.maximumListenersPerConnection
            let admitted = state.withLock { state -> Result<Void, TandemError> in
                if state.listenIDs.contains(requestID) {
                    return .failure(TandemError.invalidArgument("A listener with id \(requestID) is already running on this connection; use a new id."))
                }
                if state.listenIDs.count >= limit {
                    return .failure(TandemError(.resourceExhausted, "This connection already runs \(limit) listeners, the most allowed; stop one (unlisten) first."))
                }
                state.listenIDs.insert(requestID)
                return .success(())
            }
            if case .failure(let error) = admitted {
                outbox.send(.error(id: requestID, error))
                return
            }
            let key = ListenerKey(session: id, target: requestID)
            tasks.addTask {
                await self.hub.listen(key, target: target, resumeFrom: resumeFrom, outbox: self.outbox)
            }
        case .unlisten(let requestID):
            state.withLock { _ = $0.listenIDs.remove(requestID) }
            hub.unlisten(ListenerKey(session: id, target: requestID))
        case .write(let requestID, let mutations):
            let limit = configuration.limits.maximumPendingWritesPerConnection
            guard pendingWrites.add(1, ordering: .relaxed).newValue <= limit else {
                pendingWrites.subtract(1, ordering: .relaxed)
                outbox.send(.error(id: requestID, TandemError(.unavailable, "This connection has \(limit) writes waiting to commit; nothing was written. Wait for their answers and retry.")))
                return
            }
            writesContinuation.yield((requestID, mutations))
        case .get(let requestID, let path):
            tasks.addTask {
                do {
                    let version = try await self.store.currentVersion()
                    let document = try await self.store.document(at: path)
                    self.outbox.send(.documents(id: requestID, documents: document.map { [$0] } ?? [], version: version))
                } catch {
                    self.outbox.send(.error(id: requestID, Self.tandemError(error)))
                }
            }
        case .query(let requestID, let target):
            tasks.addTask {
                do {
                    let snapshot = try await self.store.read(target)
                    self.outbox.send(.documents(id: requestID, documents: snapshot.documents, version: snapshot.version))
                } catch {
                    self.outbox.send(.error(id: requestID, Self.tandemError(error)))
                }
            }
        }
    }

    /// Commits the session's writes in order until the session ends.
    func runWrites() async {
        var limiter = WriteRateLimiter(writesPerSecond: configuration.limits.maximumWritesPerSecond)
        for await (requestID, mutations) in writes {
            defer { pendingWrites.subtract(1, ordering: .relaxed) }
            guard limiter.admit(max(1, mutations.count), at: .now) else {
                outbox.send(.error(id: requestID, TandemError(.unavailable, "This connection sent more than \(configuration.limits.maximumWritesPerSecond) writes a second; nothing was written. Slow down and retry.")))
                continue
            }
            do {
                let result = try await store.commit(mutations)
                outbox.send(.ack(id: requestID, acknowledgements: result.acknowledgements))
            } catch {
                outbox.send(.error(id: requestID, Self.tandemError(error)))
            }
        }
    }

    func close() {
        writesContinuation.finish()
        hub.removeSession(id)
        outbox.finish()
    }

    static func tandemError(_ error: any Error) -> TandemError {
        if let error = error as? TandemError { return error }
        return TandemError(.internal, "The server failed: \(error).")
    }
}
