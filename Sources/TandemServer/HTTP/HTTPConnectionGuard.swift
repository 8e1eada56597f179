import NIOCore
import NIOHTTP1
import TandemCore

/// The NIO shell of ``HTTPConnectionGuardStateMachine``: it sits right after the HTTP decoder,
/// turns what passes through into the machine's events, and carries out its actions — a timer on
/// the server's clock, a JSON error answer, a close, or stepping aside for a WebSocket upgrade.
///
/// It takes whatever flows past it, not only HTTP parts: when an upgrade is granted, the HTTP
/// decoder is taken out before this guard is, and hands on the bytes it had read past the upgrade
/// request (a client may send its first frame without waiting for the `101`). Those bytes, and
/// anything else that is not an HTTP part, pass through untouched to the WebSocket behind it.
final class HTTPConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = Any
    typealias InboundOut = Any
    typealias OutboundIn = Any
    typealias OutboundOut = HTTPServerResponsePart

    private var machine: HTTPConnectionGuardStateMachine
    private let clock: ServerClock
    /// The armed timer: an event-loop task on the real clock, a task sleeping on any other.
    private var timer: Timer?

    private enum Timer {
        case scheduled(Scheduled<Void>)
        case task(Task<Void, Never>)

        func cancel() {
            switch self {
            case .scheduled(let scheduled): scheduled.cancel()
            case .task(let task): task.cancel()
            }
        }
    }
    /// Counts armings, so a timer that fires after being replaced does nothing.
    private var arming = 0
    private var sawHeadThisRead = false
    /// Requests passed on to the server, and responses begun: the `n`th response answers the
    /// `n`th request (HTTP/1.1 answers in order).
    private var requestsPassed = 0
    private var responsesBegun = 0
    private var responsesEnded = 0
    /// The request, counted as above, that said `Connection: close` (or was HTTP/1.0 without
    /// keep-alive): the connection's last. Its answer says so, and nothing after it is served.
    private var lastRequest: Int?
    /// The last request ended, or a request was refused from its head (its answer perhaps waiting
    /// behind one under way): what follows on the connection is not read, nor served.
    private var lastRequestEnded = false
    /// A 101 was written: step aside once it is flushed.
    private var stepAsideAfterFlush = false

    /// Told when this guard answers and closes the connection itself.
    private let closed: GuardedHTTPChannel.ClosedByGuard?
    /// The connection was accepted past the server's cap, into the room kept for health probes
    /// (``ConnectionCapacity``): only `/health` and `/metrics` are answered on it.
    private let probesOnly: ConnectionCapacity?

    init(timeouts: HTTPConnectionGuardStateMachine.Timeouts, maximumBodyBytes: Int = .max, sites: SitePolicy = SitePolicy(), clock: ServerClock,
         closed: GuardedHTTPChannel.ClosedByGuard? = nil, probesOnly: ConnectionCapacity? = nil) {
        self.clock = clock
        self.closed = closed
        self.probesOnly = probesOnly
        machine = HTTPConnectionGuardStateMachine(timeouts: timeouts, maximumBodyBytes: maximumBodyBytes, sites: sites, now: clock.now())
    }

    func handlerAdded(context: ChannelHandlerContext) {
        run(machine.firstWake, context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    /// The connection is gone (or no longer HTTP): no timer may hold this handler, and with it the
    /// whole pipeline, any longer.
    private func stop() {
        gone = true
        timer?.cancel()
        timer = nil
    }

    /// Whether a request target is the WebSocket stream's, which upgrades.
    static func isStreamPath(_ target: String) -> Bool {
        target == "/v1/stream" || target.hasPrefix("/v1/stream?")
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let part = unwrapInboundIn(data) as? HTTPServerRequestPart else {
            // Bytes past an upgrade request, handed on by the decoder as it leaves: the WebSocket's.
            if !closing { context.fireChannelRead(data) }
            return
        }
        // Once answered and closing, nothing more of the connection is served; nor is anything
        // pipelined behind a request that said it was the last.
        guard !closing, !lastRequestEnded else { return }
        switch part {
        case .head(let head):
            sawHeadThisRead = true
            let summary = Self.summary(of: head)
            let refusal = probesOnly?.refusal(target: summary.target) ?? machine.refusal(of: summary, isStreamPath: Self.isStreamPath)
            // Behind answers still to come (pipelined), the last request's close waits for its
            // own answer, which this handler counts; the machine closes after the answer under way.
            let behindOthers = requestsPassed > responsesEnded
            let action = machine.headArrived(now: clock.now(), closesConnection: summary.closesConnection && !behindOthers, refusal: refusal)
            if refusal == nil {
                requestsPassed += 1
                if summary.closesConnection { lastRequest = requestsPassed }
                context.fireChannelRead(data)
            } else {
                // Its body, and any request pipelined behind it, never reach a route: the answer
                // closes the connection once the ones before it are written.
                lastRequestEnded = true
            }
            run(action, context: context)
        case .body:
            context.fireChannelRead(data)
        case .end:
            let action = machine.requestEnded(now: clock.now())
            if lastRequest != nil { lastRequestEnded = true }
            context.fireChannelRead(data)
            run(action, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if !sawHeadThisRead { run(machine.bytesArrived(now: clock.now()), context: context) }
        sawHeadThisRead = false
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard let part = unwrapOutboundIn(data) as? HTTPServerResponsePart else {
            context.write(data, promise: promise)
            return
        }
        switch part {
        case .head(var head):
            let action = machine.responseHeadWritten(status: Int(head.status.code))
            // A final answer (not 100 Continue) to the connection's last request says it closes.
            if head.status.code >= 200 || head.status.code == 101 {
                responsesBegun += 1
                if responsesBegun == lastRequest, head.status.code != 101 {
                    head.headers.replaceOrAdd(name: "Connection", value: "close")
                    context.write(wrapOutboundOut(.head(head)), promise: promise)
                    run(action, context: context)
                    return
                }
            }
            context.write(data, promise: promise)
            // The 101 must be flushed through this handler before it leaves (a flush sent to a
            // handler already removed goes nowhere); the upgrade then takes the HTTP handlers out.
            if action == .stepAside {
                stepAsideAfterFlush = true
            } else {
                run(action, context: context)
            }
        case .end:
            var action = machine.responseEnded(now: clock.now())
            responsesEnded += 1
            // The answer to the connection's last request, pipelined behind others, is written.
            if responsesEnded == lastRequest {
                switch action {
                case .none, .wake: action = .close
                case .refuse, .close, .stepAside: break
                }
            }
            let written = promise ?? context.eventLoop.makePromise()
            context.write(data, promise: written)
            if action != .none {
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                written.futureResult.whenComplete { _ in loopBound.value.0.run(action, context: loopBound.value.1) }
            }
        case .body:
            context.write(data, promise: promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        context.flush()
        if stepAsideAfterFlush {
            stepAsideAfterFlush = false
            run(.stepAside, context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Bytes behind the connection's last request are not read: the decoder's complaint about
        // them is moot (the connection closes once that request is answered).
        if lastRequestEnded { return }
        guard let parse = error as? HTTPParserError else {
            // Once answered, the decoder's complaints about the bytes after the bad request are moot.
            if !closing { context.fireErrorCaught(error) }
            return
        }
        // Swallowed: the server answers it here, once, instead of the framework's empty 400.
        let (status, refusal) = Self.describe(parse)
        run(machine.parseFailed(status: status, refusal), context: context)
    }

    /// Whether this guard answered or closed the connection.
    private var closing = false
    /// Whether the connection closed or the guard was removed.
    private var gone = false

    private func run(_ action: HTTPConnectionGuardStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .wake(let deadline):
            arm(deadline, context: context)
        case .refuse(let status, let error, let extraHeaders):
            closing = true
            closed?.value.store(true, ordering: .relaxed)
            timer?.cancel()
            var body = context.channel.allocator.buffer(capacity: 128)
            body.writeString(JSONText.encode(.object(["error": .object(["code": .string(error.code.rawValue), "message": .string(error.message)])])))
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Content-Length", value: String(body.readableBytes))
            headers.add(name: "Connection", value: "close")
            for (name, value) in extraHeaders.sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
            let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers)
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        case .close:
            closing = true
            closed?.value.store(true, ordering: .relaxed)
            timer?.cancel()
            context.close(promise: nil)
        case .stepAside:
            timer?.cancel()
            timer = nil
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    private func arm(_ deadline: Duration, context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        guard !gone else { return }
        arming += 1
        let armed = arming
        let clock = self.clock
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        let fire: @Sendable () -> Void = {
            let (handler, context) = loopBound.value
            guard handler.arming == armed else { return }
            handler.run(handler.machine.timerFired(now: handler.clock.now()), context: context)
        }
        if clock.isContinuous {
            timer = .scheduled(eventLoop.scheduleTask(in: .nanoseconds(max(0, (deadline - clock.now()).nanoseconds)), fire))
            return
        }
        timer = .task(Task {
            do {
                try await clock.sleepUntil(deadline)
            } catch {
                return
            }
            eventLoop.execute(fire)
        })
    }

    /// What the state machine reads of a request head.
    static func summary(of head: HTTPRequestHead) -> HTTPConnectionGuardStateMachine.Head {
        let headers = head.headers
        var summary = HTTPConnectionGuardStateMachine.Head(target: head.uri)
        summary.upgrade = headers.first(name: "upgrade")
        summary.webSocketVersion = headers.first(name: "sec-websocket-version")
        summary.hasWebSocketKey = headers.contains(name: "sec-websocket-key")
        summary.contentLength = headers.first(name: "content-length").flatMap { Int($0.trimmingWhitespace) }
        summary.method = head.method.rawValue
        summary.host = headers.first(name: "host")
        summary.origin = headers.first(name: "origin")
        summary.contentType = headers.first(name: "content-type")
        summary.closesConnection = headers[canonicalForm: "connection"].contains { $0.lowercased() == "close" }
            || (head.version.major == 1 && head.version.minor == 0 && !headers[canonicalForm: "connection"].contains { $0.lowercased() == "keep-alive" })
        return summary
    }

    /// The status and error a parse failure is answered with.
    static func describe(_ error: HTTPParserError) -> (Int, TandemError) {
        switch error {
        case .headerOverflow:
            return (431, TandemError(.resourceExhausted, "The request's head (its request line and headers) is too large or has too many headers; the connection is closed. Keep paths and headers short."))
        case .invalidMethod:
            return (501, TandemError(.unimplemented, "The request's method is not one this server knows; the connection is closed. Use GET, PUT, PATCH, DELETE, POST, HEAD or OPTIONS."))
        case .paused, .invalidVersion:
            return (505, TandemError(.unimplemented, "This server speaks HTTP/1.1 (and WebSocket over it) only; the connection is closed."))
        case .invalidURL, .invalidPath, .invalidQueryString, .invalidFragment, .invalidConstant, .invalidCharactersUsed:
            return (400, TandemError(.invalidArgument, "The request line is not valid HTTP/1.1 (\(error)); the connection is closed. Percent-encode spaces and non-ASCII bytes in paths."))
        case .invalidContentLength, .unexpectedContentLength, .invalidChunkSize:
            return (400, TandemError(.invalidArgument, "The request's length is not valid HTTP/1.1 (\(error)): give one non-negative Content-Length, or chunked encoding alone; the connection is closed."))
        default:
            return (400, TandemError(.invalidArgument, "The request is not valid HTTP/1.1 (\(error)); the connection is closed."))
        }
    }
}
