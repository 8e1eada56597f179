import Foundation
import Synchronization
import Logging
import ServiceLifecycle
import TandemCore
import WSClient

extension TandemClient {
    /// Keeps the connection up until the task is cancelled or the service group shuts down.
    public func run() async throws {
        await withGracefulShutdownHandler {
            await connectionLoop()
        } onGracefulShutdown: {
            self.stop()
        }
        stop()
    }

    private func connectionLoop() async {
        var failures = 0
        var random = configuration.random
        while !Task.isCancelled && !state.withLock({ $0.stopped }) {
            let online = state.withLock { state -> Bool in
                state.wakeRequested = false
                return state.online
            }
            if !online {
                await waitForWake(nil)
                continue
            }
            let welcomed = await connectOnce()
            if Task.isCancelled || state.withLock({ $0.stopped }) { break }
            // A connection that was up reconnects at once; failed attempts back off.
            failures = welcomed ? 0 : failures + 1
            guard let delay = configuration.reconnectPolicy.delay(afterFailures: failures, using: &random) else {
                configuration.logger.error("giving up reconnecting to \(streamURL) after \(failures) attempts")
                break
            }
            if failures > 0 {
                configuration.logger.notice("reconnecting to \(streamURL) in \(delay) (attempt \(failures + 1))")
            }
            await waitForWake(delay)
        }
        stop()
    }

    /// Stops for good: closes the connection and ends every listener and waiting request.
    func stop() {
        let (frames, wake, listeners) = state.withLock { state -> (AsyncStream<String>.Continuation?, CheckedContinuation<Void, Never>?, [Listener]) in
            state.stopped = true
            defer {
                state.wake = nil
                state.listeners = [:]
            }
            return (state.connection?.frames, state.wake, Array(state.listeners.values))
        }
        frames?.finish()
        wake?.resume()
        for listener in listeners {
            listener.continuation.finish(throwing: TandemError(.cancelled, "The Tandem client stopped."))
        }
    }

    /// Sleeps on the clock for `delay` (or until woken, when nil), or less when a read, a write or
    /// `setOnline(true)` asks for an attempt now.
    private func waitForWake(_ delay: Duration?) async {
        await WakeableSleep.sleep(on: configuration.clock, for: delay) { continuation in
            self.state.withLock { state -> Bool in
                if state.wakeRequested || state.stopped { return true }
                state.wake = continuation
                return false
            }
        } unpark: {
            self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.wake = nil }
                return state.wake
            }
        }
    }

    /// One connection, from the WebSocket upgrade until it closes. Returns whether the server said welcome.
    private func connectOnce() async -> Bool {
        state.withLock { $0.connectionAttempts += 1 }
        let welcomed = WelcomeFlag()
        var socketConfiguration = WebSocketClientConfiguration(maxFrameSize: 1 << 20)
        socketConfiguration.closeTimeout = .seconds(2)
        let client = WebSocketClient(url: streamURL, configuration: socketConfiguration, logger: configuration.logger) { inbound, outbound, _ in
            await self.session(inbound: inbound, outbound: outbound, welcomed: welcomed)
        }
        do {
            try await client.run()
        } catch {
            configuration.logger.debug("connection to \(streamURL) failed: \(error)")
        }
        connectionEnded()
        return welcomed.value
    }

    private func session(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, welcomed: WelcomeFlag) async {
        let (frames, framesContinuation) = AsyncStream.makeStream(of: String.self)
        let generation = state.withLock { state -> Int? in
            guard state.online, !state.stopped else { return nil }
            state.generation += 1
            state.connection = Connection(generation: state.generation, frames: framesContinuation)
            return state.generation
        }
        guard let generation else {
            try? await outbound.close(.normalClosure, reason: nil)
            return
        }
        framesContinuation.yield(ClientMessage.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: configuration.token).text)
        let heard = HeardCounter()
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await text in frames {
                    do {
                        try await outbound.writeTextMessage(text)
                    } catch {
                        break
                    }
                }
                // The frames ended: going offline, stopping, or a dead connection. Close the socket.
                try? await outbound.close(.normalClosure, reason: nil)
            }
            group.addTask { [configuration] in
                while !Task.isCancelled {
                    do {
                        try await configuration.clock.sleep(for: configuration.heartbeatInterval)
                    } catch {
                        return
                    }
                    if heard.tick() > configuration.missedHeartbeatsAllowed {
                        configuration.logger.notice("no message from the server for \(configuration.missedHeartbeatsAllowed) heartbeats; reconnecting")
                        framesContinuation.finish()
                        return
                    }
                    framesContinuation.yield(ClientMessage.heartbeat.text)
                }
            }
            do {
                // Reading goes on after a drop is decided, until the close handshake completes.
                var dropping = false
                for try await message in inbound.messages(maxSize: configuration.maximumMessageBytes) {
                    heard.reset()
                    guard !dropping, case .text(let text) = message else { continue }
                    if !receive(text, generation: generation, welcomed: welcomed) {
                        dropping = true
                        connectionEnded()
                        framesContinuation.finish()
                    }
                }
            } catch {
                configuration.logger.debug("connection to \(streamURL) ended: \(error)")
            }
            framesContinuation.finish()
            group.cancelAll()
        }
    }

    /// Handles one server message; false when the connection should be dropped.
    private func receive(_ text: String, generation: Int, welcomed: WelcomeFlag) -> Bool {
        let message: ServerMessage
        do {
            message = try ServerMessage.parse(text)
        } catch {
            configuration.logger.warning("ignoring a malformed message from the server: \(error)")
            return true
        }
        switch message {
        case .welcome:
            welcomed.set()
            didConnect(generation: generation)
        case .heartbeat:
            break
        case .ack(let id, _), .documents(let id, _, _):
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
        case .error(nil, let error):
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

    /// The server said welcome: resume every listener, wake whoever waits, tell the engines.
    private func didConnect(generation: Int) {
        let (waiters, handlers) = state.withLock { state -> ([CheckedContinuation<Void, Never>], [ReachabilityHandler]) in
            guard var connection = state.connection, connection.generation == generation else { return ([], []) }
            connection.welcomed = true
            state.connection = connection
            for (id, listener) in state.listeners {
                connection.frames.yield(ClientMessage.listen(id: id, target: listener.target, resumeFrom: listener.lastVersion).text)
            }
            defer { state.connectedWaiters = [] }
            return (state.connectedWaiters, state.reachability)
        }
        configuration.logger.info("connected to \(streamURL)")
        waiters.forEach { $0.resume() }
        handlers.forEach { $0.call() }
    }

    /// The connection is gone: fail what waits on it; listeners that must fail do, the others wait
    /// to resume.
    private func connectionEnded() {
        let (pending, failing) = state.withLock { state -> ([PendingReply], [Listener]) in
            state.connection = nil
            let pending = Array(state.pending.values)
            state.pending = [:]
            var failing: [Listener] = []
            for (id, var listener) in state.listeners {
                if listener.failWhenDisconnected {
                    failing.append(listener)
                    state.listeners[id] = nil
                } else {
                    listener.partial = []
                    state.listeners[id] = listener
                }
            }
            return (pending, failing)
        }
        let error = TandemError(.unavailable, "The connection to the Tandem server at \(url.absoluteString) was lost; retrying in the background.")
        pending.forEach { $0.resume(.failure(error)) }
        failing.forEach { $0.continuation.finish(throwing: error) }
    }
}

/// Whether the server said welcome on a connection.
final class WelcomeFlag: Sendable {
    private let flag = Mutex(false)
    var value: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}

/// Heartbeat intervals since the server was last heard.
final class HeardCounter: Sendable {
    private let count = Mutex(0)
    func tick() -> Int { count.withLock { $0 += 1; return $0 } }
    func reset() { count.withLock { $0 = 0 } }
}
