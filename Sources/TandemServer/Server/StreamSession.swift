import Foundation
import Logging
import Synchronization
import TandemCore

/// One client's WebSocket session: answers its requests through the ``SyncService``, runs its
/// listeners, and commits its writes in the order sent. Bad input gets an error frame answering
/// it; the session goes on.
final class StreamSession: Sendable {
    let id: Int
    let outbox: SessionOutbox
    let service: SyncService
    let configuration: SyncServerConfiguration
    let clock: ServerClock
    /// Tells the session when its token expires, on the server's clock; nil in process.
    let watchdog: SessionWatchdog?
    /// The address the connection came from (an anonymous caller's quotas count against it);
    /// nil in process.
    let address: String?

    private struct State {
        /// Who said hello (its token and client id); nil until then.
        var principal: Principal?
        /// When the hello's token expires: past it, every request is refused (`token-expired`)
        /// and the session's listeners stop, until the client reconnects with a fresh token.
        var expiresAt: Date?
        /// The protocol agreed in `hello`.
        var protocolVersion = TandemVersion.wireProtocol
        /// The connection's message rate and the order, queue and rate of its writes.
        var counters: Admission.ConnectionCounters
        /// The caller this connection counts against in ``Admission``, once welcomed.
        var seat: Admission.Seat?
        /// Write requests admitted and waiting for `runWrites`, in the order they came.
        var queue: [QueuedWrite] = []
    }

    /// A write request admitted to the queue.
    struct QueuedWrite {
        let id: Int
        let mutations: [Mutation]
        /// Decided one mutation at a time (`"atomic": false`) rather than all together.
        let each: Bool
        /// Answered without the documents of applied writes (`"brief": true`).
        var brief = false

        /// The requests the store decides for it: the whole write, or each mutation on its own.
        var storeRequests: [[Mutation]] { each ? mutations.map { [$0] } : [mutations] }

        /// Its answer, from the store's answers to ``storeRequests``. A write decided mutation by
        /// mutation is answered with each one's fate (a mutation the store could not take for good
        /// is refused on its own), or with the first passing failure, which the client answers by
        /// sending it all again.
        func answer(_ results: ArraySlice<Result<CommitResult, TandemError>>) -> Result<CommitResult, TandemError> {
            guard brief else { return decided(results) }
            return decided(results).map { result in
                var result = result
                for index in result.acknowledgements.indices where result.acknowledgements[index].isApplied {
                    result.acknowledgements[index].document = nil
                }
                return result
            }
        }

        private func decided(_ results: ArraySlice<Result<CommitResult, TandemError>>) -> Result<CommitResult, TandemError> {
            guard each else { return results.first! }
            var acknowledgements: [WriteAcknowledgement] = []
            acknowledgements.reserveCapacity(mutations.count)
            for (mutation, result) in zip(mutations, results) {
                switch result {
                case .success(let answer):
                    acknowledgements += answer.acknowledgements
                case .failure(let error) where error.isPermanent:
                    acknowledgements.append(.refused(mutation.id, error, at: .zero))
                case .failure(let error):
                    return .failure(error)
                }
            }
            return .success(CommitResult(acknowledgements: acknowledgements, batch: nil))
        }
    }

    private let state: Mutex<State>
    /// Wakes `runWrites` when a write is queued.
    private let wake: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation

    /// The most write requests committed together in one call to the store.
    static let writesPerCommit = 64

    init(id: Int, service: SyncService, configuration: SyncServerConfiguration, clock: ServerClock, watchdog: SessionWatchdog? = nil, address: String? = nil) {
        self.id = id
        self.watchdog = watchdog
        self.address = address
        self.service = service
        self.configuration = configuration
        self.clock = clock
        outbox = SessionOutbox(budget: configuration.maximumQueuedBytesPerConnection, metrics: service.metrics)
        state = Mutex(State(counters: Admission.ConnectionCounters(limits: configuration.limits)))
        (wake, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Who this connection speaks for: made at `hello`, from its token and client id.
    private var context: Principal {
        state.withLock { $0.principal ?? Principal() }
    }

    /// Handles one text message, as the UTF-8 bytes that came; reads and listens run in `tasks`
    /// (reads counted in flight, see ``read(_:in:_:)``), writes go to the write queue.
    func handle(_ bytes: UnsafeRawBufferPointer, tasks: inout DiscardingTaskGroup) {
        service.metrics.received(bytes: bytes.count)
        // The cheap checks first, before the message is parsed: its size and the connection's
        // message rate. A refusal answers the id its first bytes name.
        if let refusal = state.withLock({ service.admission.admitMessage(bytes: bytes.count, on: &$0.counters) }) {
            outbox.send(.error(id: ClientMessage.requestID(prefix: bytes), refusal))
            return
        }
        let value: JSONValue
        do {
            // The parser refuses invalid UTF-8 wherever it is: the bytes are never repaired.
            value = try JSONText.parse(utf8: bytes.assumingMemoryBound(to: UInt8.self), maximumDepth: configuration.limits.maximumJSONDepth)
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
        if case .hello(let clientID, let protocolVersion, let token) = message {
            hello(clientID: clientID, protocolVersion: protocolVersion, token: token)
            return
        }
        let (said, expiresAt) = state.withLock { ($0.principal != nil, $0.expiresAt) }
        guard said else {
            outbox.send(.error(id: message.requestID, TandemError(.failedPrecondition, "Send hello (with your client id and protocol \(TandemVersion.wireProtocol)) before anything else.")))
            return
        }
        if let expiresAt, let access = service.access, access.now() >= expiresAt {
            service.hub.removeSession(id)
            outbox.send(.error(id: message.requestID, Self.expired(at: expiresAt)))
            return
        }
        switch message {
        case .hello:
            break
        case .heartbeat:
            outbox.send(.heartbeat)
        case .listen(let requestID, let target, let resumeFrom, let notify):
            // Registered here, before the next message is read, so an unlisten right behind it
            // finds it; the snapshot loads in a task of its own.
            let key = ListenerKey(session: id, target: requestID)
            switch service.register(key, target: target, outbox: outbox, context: context, notify: notify) {
            case .success:
                tasks.addTask { await self.service.load(key, target: target, resumeFrom: resumeFrom) }
            case .failure(let refusal):
                // A duplicate's answer names no id: the client would take it for the running
                // listener's end.
                outbox.send(refusal.answer(to: key))
            }
        case .unlisten(let requestID):
            service.unlisten(ListenerKey(session: id, target: requestID))
        case .write(let requestID, let mutations, let brief), .writeEach(let requestID, let mutations, let brief):
            let each: Bool
            if case .writeEach = message { each = true } else { each = false }
            let principal = self.context
            let decision = state.withLock { state -> WriteSequencer.Decision in
                let decision = service.admission.admitWrites(mutations, each: each, from: principal, on: &state.counters)
                if decision == .proceed { state.queue.append(QueuedWrite(id: requestID, mutations: mutations, each: each, brief: brief)) }
                return decision
            }
            switch decision {
            case .proceed: wakeContinuation.yield()
            case .refuse(let error): outbox.send(.error(id: requestID, error))
            }
        case .get(let requestID, let path):
            read(requestID, in: &tasks) { context in
                let snapshot = try await self.service.get(path, context: context)
                return .documents(id: requestID, documents: snapshot.documents, version: snapshot.version)
            }
        case .query(let requestID, let target):
            read(requestID, in: &tasks) { context in
                let snapshot = try await self.service.query(target, context: context)
                return .documents(id: requestID, documents: snapshot.documents, version: snapshot.version)
            }
        case .fetch(let requestID, let target, let since, let limit, let fromStart):
            read(requestID, in: &tasks) { context in
                let page = try await self.service.changes(since: since, in: target, limit: min(limit, SyncService.maximumChangesPerPage), fromStart: fromStart,
                                                          context: context)
                return .page(id: requestID, page)
            }
        }
    }

    /// Runs a read (`get`, `query` or `fetch`) in a task of its own, once ``Admission`` admits it
    /// to the connection's reads in flight; past them it is refused at once (`resource-exhausted`
    /// with `retryAfter`), and the session goes on. `body` reads, as the session's principal, and
    /// returns the answer.
    private func read(_ requestID: Int, in tasks: inout DiscardingTaskGroup, _ body: @escaping @Sendable (Principal) async throws -> ServerMessage) {
        if let refusal = state.withLock({ service.admission.admitRead(on: &$0.counters) }) {
            outbox.send(.error(id: requestID, refusal))
            return
        }
        let context = self.context
        tasks.addTask {
            let answer: ServerMessage
            do {
                // However the read ends (answered, failed, or cancelled with the session), it
                // leaves the count, and before its answer goes out: a client that has the answer
                // finds the room it made.
                defer { self.state.withLock { self.service.admission.readEnded(on: &$0.counters) } }
                answer = try await body(context)
            } catch {
                answer = .error(id: requestID, SyncService.tandemError(error))
            }
            self.outbox.send(answer)
        }
    }

    /// A hello whose token is refused leaves the connection as it was: the client may say hello
    /// again with another.
    private func hello(clientID: String, protocolVersion: Int, token: String?) {
        guard (TandemVersion.oldestWireProtocol...TandemVersion.wireProtocol).contains(protocolVersion) else {
            outbox.send(.error(id: nil, TandemError(.failedPrecondition, "This server speaks protocols \(TandemVersion.oldestWireProtocol) to \(TandemVersion.wireProtocol), the client \(protocolVersion); upgrade the older side.")))
            return
        }
        guard state.withLock({ $0.principal == nil }) else {
            outbox.send(.error(id: nil, TandemError(.failedPrecondition, "This connection already said hello; a connection keeps the client id it said hello with. Open a new connection to speak as another client.")))
            return
        }
        let principal: Principal
        let seat: Admission.Seat?
        do throws(TandemError) {
            principal = Principal(identity: try service.authenticate(token: token), device: clientID, address: address)
            seat = try service.admission.seat(principal)
        } catch {
            outbox.send(.error(id: nil, error))
            return
        }
        let identity = principal.identity
        let first = state.withLock { state -> Bool in
            guard state.principal == nil else { return false }
            state.principal = principal
            state.protocolVersion = protocolVersion
            state.seat = seat
            if case .user(let user) = identity { state.expiresAt = user.expiresAt }
            return true
        }
        guard first else {
            if let seat { service.admission.release(seat) }
            outbox.send(.error(id: nil, TandemError(.failedPrecondition, "This connection already said hello; a connection keeps the client id it said hello with. Open a new connection to speak as another client.")))
            return
        }
        if case .user(let user) = identity, let expiresAt = user.expiresAt, let access = service.access, let watchdog {
            // A deadline on the server's clock: at `exp` the listeners stop and the client is told,
            // whether or not it says anything meanwhile.
            let remaining = Duration.seconds(expiresAt.timeIntervalSince(access.now()))
            watchdog.expire(id, at: clock.now() + remaining) { [weak self] in self?.expire(at: expiresAt) }
        }
        let seconds = Int(configuration.heartbeatInterval.components.seconds)
        outbox.send(.welcome(protocolVersion: protocolVersion, serverVersion: TandemVersion.current, heartbeatSeconds: max(1, seconds), user: identity.user?.uid))
    }

    /// Commits the session's writes in the order they came, until the session ends: the requests
    /// waiting together go to the store in one call, so pipelined writes share its commits.
    func runWrites() async {
        for await _ in wake {
            // Once the session is closed nothing more is committed: no answer could reach the
            // client, which sends every unanswered write again on its next connection.
            while !outbox.isClosed, !Task.isCancelled {
                var refused: [(Int, TandemError)] = []
                let group = state.withLock { state -> [QueuedWrite] in
                    var group: [QueuedWrite] = []
                    var requests = 0
                    while requests < Self.writesPerCommit, !state.queue.isEmpty {
                        let entry = state.queue.removeFirst()
                        switch state.counters.writes.turn(entry.mutations) {
                        case .proceed:
                            group.append(entry)
                            requests += entry.each ? entry.mutations.count : 1
                        case .refuse(let error):
                            state.counters.writes.answered(entry.mutations, forGood: false)
                            refused.append((entry.id, error))
                        }
                    }
                    return group
                }
                for (requestID, error) in refused { outbox.send(.error(id: requestID, error)) }
                if group.isEmpty && refused.isEmpty { break }
                if group.isEmpty { continue }
                let storeResults = await service.commit(group.flatMap(\.storeRequests), context: context)
                var results: [Result<CommitResult, TandemError>] = []
                var start = storeResults.startIndex
                for entry in group {
                    let end = start + (entry.each ? entry.mutations.count : 1)
                    results.append(entry.answer(storeResults[start..<end]))
                    start = end
                }
                let (protocolVersion, aborted) = state.withLock { state in
                    var failed = false
                    for (entry, result) in zip(group, results) {
                        if case .failure(let error) = result, !error.isPermanent {
                            state.counters.writes.failed(entry.mutations)
                            state.counters.writes.answered(entry.mutations, forGood: false)
                            failed = true
                        } else {
                            state.counters.writes.answered(entry.mutations, forGood: true)
                        }
                    }
                    // Under the same lock: the queued writes of a writer that just failed are
                    // refused before the client can hear of the failure and send it again, or the
                    // write sent again would queue behind them and they would apply first.
                    var aborted: [(Int, TandemError)] = []
                    if failed {
                        state.queue.removeAll { entry in
                            guard case .refuse(let error) = state.counters.writes.turn(entry.mutations) else { return false }
                            state.counters.writes.answered(entry.mutations, forGood: false)
                            aborted.append((entry.id, error))
                            return true
                        }
                    }
                    return (state.protocolVersion, aborted)
                }
                defer { for (requestID, error) in aborted { outbox.send(.error(id: requestID, error)) } }
                for (entry, result) in zip(group, results) {
                    switch result {
                    case .success(let answer):
                        if protocolVersion < 2, let refusal = answer.refusal {
                            // Protocol 1 answered a refused write with an error frame.
                            outbox.send(.error(id: entry.id, refusal))
                        } else {
                            outbox.send(.ack(id: entry.id, acknowledgements: answer.acknowledgements))
                        }
                    case .failure(let error):
                        outbox.send(.error(id: entry.id, error))
                    }
                }
            }
        }
    }

    /// The refusal of everything a connection asks once its token expired at `date`.
    static func expired(at date: Date) -> TandemError {
        TandemError(.unauthenticated, "The token this connection said hello with expired at \(ServerTime(date).iso8601); reconnect with a fresh one.",
                    reason: TandemError.tokenExpired)
    }

    /// The token expired: the listeners stop and the client is told (an error answering nothing),
    /// which it answers by reconnecting with a fresh token. Later requests are refused alike.
    func expire(at date: Date) {
        service.hub.removeSession(id)
        outbox.send(.error(id: nil, Self.expired(at: date)))
    }

    /// Ends the session. The outbox closes first: a listener registered meanwhile either is
    /// removed here or finds it closed (see ``FanOutHub/register(_:target:outbox:limit:readGuard:restricted:)``).
    func close() {
        if let seat = state.withLock({ state -> Admission.Seat? in
            defer { state.seat = nil }
            return state.seat
        }) {
            service.admission.release(seat)
        }
        wakeContinuation.finish()
        outbox.finish()
        service.hub.removeSession(id)
    }
}
