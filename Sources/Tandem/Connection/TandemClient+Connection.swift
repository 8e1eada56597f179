import Observation
import Foundation
import Synchronization
import Logging
import ServiceLifecycle
import TandemCore

/// What the connection's run loop starts: a socket, or the sleep between attempts.
enum ConnectionCommand: Sendable {
    case connect(attempt: Int)
    case sleep(until: Duration)
}

extension TandemClient {
    /// Keeps the connection up until the task is cancelled or the service group shuts down. The
    /// decisions are a pure state machine's; this loop runs the sockets and sleeps it asks for.
    public func run() async throws {
        let first = state.withLock { state -> Bool in
            guard !state.running, !state.machine.isStopped else { return false }
            state.running = true
            return true
        }
        guard first else {
            configuration.logger.warning("TandemClient.run() was called while the client runs already, or after it stopped")
            return
        }
        startConnecting()
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await command in self.commands {
                    switch command {
                    case .connect(let attempt):
                        group.addTask { await self.connectOnce(attempt) }
                    case .sleep(let until):
                        group.addTask { await self.sleepBetweenAttempts(until: until) }
                    }
                }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            self.stop()
        }
        stop()
    }

    /// Starts the first connection attempt now, before `run()` carries it out: requests made from
    /// here on wait for its outcome instead of failing at once. `run()` does it too.
    package func startConnecting() {
        connectionEvent { $0.start() }
    }

    /// Stops for good: closes the connection and ends every listener and waiting request.
    func stop() {
        let (effects, listeners, commands) = state.withLock { state in
            var effects = Self.take(state.machine.stop(), in: &state)
            // Whoever waits for a connection will not get one.
            effects.resume += state.connectedWaiters
            state.connectedWaiters = []
            defer {
                state.listeners = [:]
                state.commands = nil
            }
            return (effects, Array(state.listeners.values), state.commands)
        }
        perform(effects)
        commands?.finish()
        for listener in listeners {
            listener.continuation.finish(throwing: TandemError(.cancelled, "The Tandem client stopped."))
        }
    }

    /// Sends the machine an event and runs what it asks; returns its actions.
    @discardableResult
    func connectionEvent(_ event: (inout ConnectionStateMachine) -> [ConnectionStateMachine.Action]) -> [ConnectionStateMachine.Action] {
        let (actions, effects) = state.withLock { state in
            let actions = event(&state.machine)
            return (actions, Self.take(actions, in: &state))
        }
        perform(effects)
        return actions
    }

    /// What the machine's actions ask, gathered under the lock. Frames are queued on the socket
    /// there and then, so they keep the order in which the machine decided them.
    struct ConnectionEffects {
        var command: ConnectionCommand?
        var resume: [CheckedContinuation<Void, Never>] = []
        /// Whether connection events were queued that no one is telling yet.
        var tellEvents = false
        var failed: (pending: [PendingReply], listeners: [Listener])?
        var sleepFailures: Int?
        var gaveUpAfter: Int?
        var connected = false
        /// A connection attempt after the first, for ``ClientMetrics``.
        var reconnecting = false
    }

    static func take(_ actions: [ConnectionStateMachine.Action], in state: inout State) -> ConnectionEffects {
        var effects = ConnectionEffects()
        // A socket that closes and is replaced at once: what was never sent on it waits for the next.
        let reconnecting = actions.contains { if case .connect = $0 { true } else { false } }
        for action in actions {
            switch action {
            case .connect(let attempt):
                state.connectionAttempts += 1
                effects.command = .connect(attempt: attempt)
                if state.connectionAttempts > 1 { effects.reconnecting = true }
            case .sendHello:
                state.connection?.frames.yield(state.hello)
            case .sendHeartbeat:
                state.connection?.frames.yield(ClientMessage.heartbeat.text)
            case .close(let attempt):
                if let connection = state.connection, connection.attempt == attempt {
                    connection.frames.finish()
                    state.connection = nil
                }
            case .resumeListeners:
                if let connection = state.connection {
                    for (id, var listener) in state.listeners {
                        connection.frames.yield(ClientMessage.listen(id: id, target: listener.target, resumeFrom: listener.lastVersion, notify: listener.notify).text)
                        listener.sent = true
                        state.listeners[id] = listener
                    }
                    for (id, frame, user, strict, _) in state.deferred {
                        if strict || user != nil, user != state.authState.uid, let reply = state.pending.removeValue(forKey: id) {
                            // Made for another user than the one welcomed now: never sent as them.
                            if effects.failed == nil { effects.failed = ([], []) }
                            effects.failed?.pending.append(reply)
                            continue
                        }
                        connection.frames.yield(frame)
                    }
                }
                state.deferred = []
                effects.resume += state.connectedWaiters
                state.connectedWaiters = []
                if state.reported == .disconnected, queue(.connection(.resumed, Array(state.connectionObservers.values)), in: &state) {
                    effects.tellEvents = true
                }
                state.reported = .resumed
                effects.connected = true
            case .failPending:
                state.connection?.frames.finish()
                state.connection = nil
                if state.reported != .disconnected {
                    state.reported = .disconnected
                    if queue(.connection(.disconnected, Array(state.connectionObservers.values)), in: &state) { effects.tellEvents = true }
                }
                // Requests and listens sent on the socket that went fail (their answer is lost);
                // those never sent wait for the next socket when one follows at once. Not a write
                // made after a request that was sent and fails now: sent on the next socket, its
                // sequences could reach the server ahead of that one's, which the server would
                // then refuse for good as out of order. It fails too, and its sender sends both
                // again, in order.
                var unsent = reconnecting ? Set(state.deferred.map(\.id)) : []
                if reconnecting, state.pending.keys.contains(where: { !unsent.contains($0) }) {
                    state.deferred.removeAll { $0.ordered }
                    unsent = Set(state.deferred.map(\.id))
                }
                if !reconnecting { state.deferred = [] }
                effects.failed = ([], [])
                for (id, reply) in state.pending where !unsent.contains(id) {
                    effects.failed?.pending.append(reply)
                    state.pending[id] = nil
                }
                for (id, var listener) in state.listeners {
                    if listener.failWhenDisconnected && (listener.sent || !reconnecting) {
                        effects.failed?.listeners.append(listener)
                        state.listeners[id] = nil
                    } else {
                        listener.partial = []
                        listener.sent = false
                        state.listeners[id] = listener
                    }
                }
            case .sleep(let until, let failures):
                effects.command = .sleep(until: until)
                effects.sleepFailures = failures
            case .endSleep:
                if let wake = state.wake { effects.resume.append(wake) }
                state.wake = nil
            case .gaveUp(let failures):
                effects.gaveUpAfter = failures
            }
        }
        if let command = effects.command {
            state.commands?.yield(command)
        }
        return effects
    }

    func perform(_ effects: ConnectionEffects) {
        if effects.connected { configuration.logger.info("connected to \(streamURL)") }
        if effects.reconnecting { configuration.metrics?.reconnects.increment() }
        if let failures = effects.sleepFailures {
            configuration.logger.notice("reconnecting to \(streamURL) after \(failures) failed attempt(s)")
        }
        if let (pending, listeners) = effects.failed {
            let error = TandemError(.unavailable, "The connection to the Tandem server at \(url.absoluteString) was lost; retrying in the background.")
            pending.forEach { $0.resume(.failure(error)) }
            listeners.forEach { $0.continuation.finish(throwing: error) }
        }
        effects.resume.forEach { $0.resume() }
        if effects.tellEvents { tellConnectionEvents() }
        if let failures = effects.gaveUpAfter {
            configuration.logger.error("giving up reconnecting to \(streamURL) after \(failures) attempts")
            stop()
        }
    }

    /// Queues a connection or auth event for its observers. Returns whether the caller is to tell
    /// the queue (no one else is telling it).
    static func queue(_ event: Notice, in state: inout State) -> Bool {
        state.events.append(event)
        defer { state.tellingEvents = true }
        return !state.tellingEvents
    }

    /// Tells queued connection events, in order, until none is left; outside the lock.
    func tellConnectionEvents() {
        while true {
            let next = state.withLock { state -> Notice? in
                guard !state.events.isEmpty else {
                    state.tellingEvents = false
                    return nil
                }
                return state.events.removeFirst()
            }
            switch next {
            case nil: return
            case .connection(let event, let observers)?:
                registrar.withMutation(of: self, keyPath: \.status) {}
                observers.forEach { $0.call(event) }
            case .auth(let event, let observers)?:
                registrar.withMutation(of: self, keyPath: \.status) {}
                observers.forEach { $0.call(event) }
            }
        }
    }

    /// Sleeps on the clock until `until`, or less when a read, a write or `setOnline` ends the
    /// sleep; then tells the machine.
    private func sleepBetweenAttempts(until: Duration) async {
        await WakeableSleep.sleep(on: configuration.clock, for: until - elapsed()) { continuation in
            self.state.withLock { state -> Bool in
                // Woken already, or moved on: no sleep.
                guard state.machine.phase == .waiting(until: until, woken: false) else { return true }
                state.wake = continuation
                return false
            }
        } unpark: {
            self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.wake = nil }
                return state.wake
            }
        }
        let now = elapsed()
        connectionEvent { $0.sleepEnded(now: now) }
    }

    /// One connection, from its opening until it closes.
    private func connectOnce(_ attempt: Int) async {
        var failure: (any Error)?
        switch await connectWithinTimeout(attempt) {
        case .ended(let error): failure = error
        // The machine has moved on: the attempt is over for it.
        case .abandoned: return
        }
        if let failure { configuration.logger.debug("connection to \(streamURL) failed: \(failure)") }
        let now = elapsed()
        let random = randomness.next()
        connectionEvent { $0.closed(attempt: attempt, now: now, random: random) }
    }

    /// How a connection attempt's socket ended, for ``connectOnce(_:)``.
    enum ConnectEnd: Sendable {
        /// It closed, or could not open (with why).
        case ended((any Error)?)
        /// It did not open in time, or the client stopped before it opened: left behind.
        case abandoned
    }

    /// Asks for the hello (the token provider's token) and runs the transport's connect (and,
    /// once it opens, the session) in a task of its own, and returns when it ends; or, while it
    /// has not opened, when ``TandemClientConfiguration/connectTimeout`` passes or the client
    /// stops. A WebSocket upgrade that a server never answers waits on a future that
    /// cancellation does not end, so such an attempt is left behind rather than awaited (and
    /// cancelled, for transports and token providers that heed it): the machine gives it up
    /// (``ConnectionStateMachine/connectTimedOut(attempt:now:random:)``), and its socket, should
    /// it open later, is closed at once. An open session is awaited until it has closed.
    private func connectWithinTimeout(_ attempt: Int) async -> ConnectEnd {
        let end = Ticket<ConnectEnd>()
        let opened = Atomic<Bool>(false)
        let timeout = configuration.connectTimeout
        let timer = Task { [configuration] in
            do { try await configuration.clock.sleep(for: timeout) } catch { return }
            let now = elapsed()
            let random = randomness.next()
            guard !connectionEvent({ $0.connectTimedOut(attempt: attempt, now: now, random: random) }).isEmpty else { return }
            configuration.logger.notice("the server at \(streamURL) did not open a connection within \(timeout); trying again after the backoff")
            end.fulfill(.success(.abandoned))
        }
        let connecting = Task { [transport] in
            do {
                let hello = try await helloForNextAttempt()
                // A token that came after its attempt was given up opens nothing.
                guard state.withLock({ state -> Bool in
                    guard state.machine.attempt == attempt else { return false }
                    state.hello = hello
                    return true
                }) else { throw CancellationError() }
                try await transport.connect { connection in
                    opened.store(true, ordering: .sequentiallyConsistent)
                    timer.cancel()
                    await self.session(attempt, connection)
                }
                end.fulfill(.success(.ended(nil)))
            } catch {
                end.fulfill(.success(.ended(error)))
            }
        }
        let outcome = await withTaskCancellationHandler {
            // Only ever fulfilled with a success.
            (try? await end.value()) ?? .abandoned
        } onCancel: {
            connecting.cancel()
            // An open session closes on the cancellation and is awaited; one still opening is not.
            if !opened.load(ordering: .sequentiallyConsistent) { end.fulfill(.success(.abandoned)) }
        }
        timer.cancel()
        if case .abandoned = outcome { connecting.cancel() }
        return outcome
    }

    private func session(_ attempt: Int, _ connection: TransportConnection) async {
        let (frames, framesContinuation) = AsyncStream.makeStream(of: String.self)
        let opened = state.withLock { state -> Bool in
            let actions = state.machine.opened(attempt: attempt)
            guard !actions.isEmpty else { return false }
            state.connection = Connection(attempt: attempt, frames: framesContinuation)
            _ = Self.take(actions, in: &state)  // hello, queued first
            return true
        }
        guard opened else {
            await connection.close()
            return
        }
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await text in frames {
                    do {
                        try await connection.send(text)
                    } catch {
                        break
                    }
                }
                // The frames ended: going offline, stopping, or a dead connection. Close it.
                await connection.close()
            }
            group.addTask { [configuration] in
                while !Task.isCancelled {
                    do {
                        try await configuration.clock.sleep(for: configuration.heartbeatInterval)
                    } catch {
                        return
                    }
                    let actions = self.connectionEvent { $0.heartbeatDue(attempt: attempt) }
                    if actions.contains(.close(attempt: attempt)) {
                        configuration.logger.notice("no message from the server for \(configuration.missedHeartbeatsAllowed) heartbeats; reconnecting")
                    }
                    if actions != [.sendHeartbeat] { return }
                }
            }
            do {
                // Reading goes on after a drop is decided, until the connection has closed.
                var dropping = false
                for try await message in connection.messages {
                    state.withLock { $0.machine.heard(attempt: attempt) }
                    guard !dropping, case .text(let text) = message else { continue }
                    if !receive(text, attempt: attempt) {
                        dropping = true
                        connectionEvent { $0.misbehaved(attempt: attempt) }
                    }
                }
            } catch {
                configuration.logger.debug("connection to \(streamURL) ended: \(error)")
            }
            framesContinuation.finish()
            group.cancelAll()
        }
    }

    /// Whether the server said the connection's token expired: the connection is then dropped
    /// and made again with a fresh token from the provider.
    private func expired(_ error: TandemError) -> Bool {
        guard error.code == .unauthenticated, error.reason == TandemError.tokenExpired else { return false }
        configuration.logger.notice("the token for \(streamURL) expired; reconnecting with a fresh one")
        return true
    }

    /// Handles one server message; false when the connection should be dropped.
    private func receive(_ text: String, attempt: Int) -> Bool {
        let message: ServerMessage
        do {
            message = try ServerMessage.parse(text)
        } catch {
            configuration.logger.warning("ignoring a malformed message from the server: \(error)")
            return true
        }
        switch message {
        case .welcome(_, _, _, let user):
            if tokenSource != nil { setAuthState(user.map { .signedIn(uid: $0) } ?? .signedOut) }
            connectionEvent { $0.welcomed(attempt: attempt) }
        case .heartbeat:
            break
        case .ack(let id, _), .documents(let id, _, _), .page(let id, _):
            let (reply, drop) = state.withLock { state -> (PendingReply?, Bool) in
                if case .ack = message, let before = state.acknowledgementsBeforeDrop {
                    if before == 0 {
                        state.acknowledgementsBeforeDrop = nil
                        return (nil, true)
                    }
                    state.acknowledgementsBeforeDrop = before - 1
                }
                return (state.pending.removeValue(forKey: id), false)
            }
            if drop { return false }
            reply?.resume(.success(message))
        case .error(let id?, let error):
            let (reply, listener) = state.withLock { state in
                (state.pending.removeValue(forKey: id), state.listeners.removeValue(forKey: id))
            }
            reply?.resume(.success(message))
            listener?.continuation.finish(throwing: error)
            return !expired(error)
        case .error(nil, let error):
            if expired(error) { return false }
            if state.withLock({ $0.machine.phase == .open(attempt: attempt) }) {
                // Hello refused: a bad token, a client id bound to another user, or a protocol
                // the server does not speak. Try again on the backoff.
                configuration.logger.error("the server at \(streamURL) refused hello: \(error)")
                if error.code == .unauthenticated && tokenSource != nil { setAuthState(.signedOut) }
                return false
            }
            configuration.logger.warning("the server reports: \(error)")
        case .sharedBatch(let targets, let batch):
            let continuations = state.withLock { state in
                targets.compactMap { target -> AsyncThrowingStream<RemoteChangeBatch, any Error>.Continuation? in
                    state.listeners[target]?.lastVersion = batch.version
                    return state.listeners[target]?.continuation
                }
            }
            for continuation in continuations { continuation.yield(batch) }
        case .batch(let target, let batch, _, let more):
            let ready = state.withLock { state -> (AsyncThrowingStream<RemoteChangeBatch, any Error>.Continuation, RemoteChangeBatch)? in
                // Taken out of the dictionary while it grows, so its partial batch is not copied.
                guard var listener = state.listeners.removeValue(forKey: target) else { return nil }
                if listener.inPieces {
                    var piece = batch
                    piece.continues = more
                    if !more { listener.lastVersion = batch.version }
                    state.listeners[target] = listener
                    return (listener.continuation, piece)
                }
                if more {
                    listener.partial += batch.changes
                    state.listeners[target] = listener
                    return nil
                }
                let changes = listener.partial.isEmpty ? batch.changes : listener.partial + batch.changes
                let whole = RemoteChangeBatch(isSnapshot: batch.isSnapshot, changes: changes, version: batch.version)
                listener.partial = []
                listener.lastVersion = batch.version
                state.listeners[target] = listener
                return (listener.continuation, whole)
            }
            if let (continuation, whole) = ready { continuation.yield(whole) }
        }
        return true
    }
}

