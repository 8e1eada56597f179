import TandemCore

/// The shell around ``ChangeSyncStateMachine``: every function here runs on the engine's owner
/// (``ChangeSyncEngine/owner``), as a step or a part of one.
extension ChangeSyncEngine {
    /// Runs `body` on the engine's state, then tells what it changed (status, state, last error)
    /// to observers and subscribers. On the owner; never inside another step.
    @discardableResult
    func step<Result>(_ body: (inout Core) throws -> Result) rethrows -> Result {
        let before = core.current
        let result = try core.access(body)
        let after = core.current
        if after != before { announce(before, after) }
        return result
    }

    private func announce(_ before: Published, _ after: Published) {
        if after.status != before.status {
            registrar.withMutation(of: self, keyPath: \.status) {}
            let signals = listeners.withLock { listeners -> [AsyncStream<Void>.Continuation] in
                // Under the lock a subscription reads its first status under: each is told once.
                let status = core.current.status
                for (token, subscriber) in listeners.statuses where subscriber.last != status {
                    subscriber.continuation.yield(status)
                    listeners.statuses[token]?.last = status
                }
                return Array(listeners.signals.values)
            }
            signals.forEach { $0.yield() }
        }
        if after.state != before.state { registrar.withMutation(of: self, keyPath: \.state) {} }
        if after.lastError != before.lastError { registrar.withMutation(of: self, keyPath: \.lastError) {} }
    }

    func recordsPath(_ account: String) throws -> CollectionPath {
        try CollectionPath("users/\(account)/zones/\(configuration.zoneName)/records")
    }

    /// The user signed in now is `uid`: the machine takes that account's stored queue and state.
    func accountChanged(_ uid: String?) {
        guard step({ $0.machine.account != uid && !$0.isShutDown }) else { return }
        var rows: [ChangeQueueStore.Row] = []
        if let uid {
            do {
                rows = try store.pending(account: uid)
            } catch {
                // The account's queue cannot be read: nothing of it is sent; the app hears why.
                noteFailure(error)
            }
        }
        let (subscription, state, fetches) = step { core -> (Task<Void, Never>?, State, [(token: ChangeToken?, account: String?)]) in
            defer { core.subscription = nil }
            core.dropReadAhead()
            core.waiters.failOthers(than: uid, TandemError(.aborted, "Another user signed in (or the user signed out) before the server answered; the changes stay queued for the user they were made by, and go when that user signs in again."))
            if core.state.account != uid {
                core.state = State()
                core.state.account = uid
            }
            var fetches: [(token: ChangeToken?, account: String?)] = []
            if uid != nil { swap(&fetches, &core.fetchesAtSignIn) }
            return (core.subscription, core.state, fetches)
        }
        subscription?.cancel()
        handle(.account(uid, pending: rows.map(\.change), token: state.token, zoneReady: state.zoneReady, now: now()))
        emit(.accountChanged(uid)) { $0.syncEngine(self, didChangeAccount: uid) }
        // Fetches asked while nobody was signed in; a token of another user's is no use to this one.
        for fetch in fetches { handle(.fetch(fetch.account == uid ? fetch.token : nil, now: now())) }
    }

    /// Hands the machine `event`. With `account`, only while that account is the machine's: the
    /// changes of an event made for an account that was switched away from meanwhile (a
    /// conflict's resolution while the user changed) stay in that account's stored queue, and go
    /// when it signs in again; they never join another account's queue, which would send them
    /// into that user's zone under that user's writer.
    func handle(_ event: ChangeSyncStateMachine.Event, for account: String? = nil) {
        let actions = step { core -> [ChangeSyncStateMachine.Action] in
            if let account, core.machine.account != account { return [] }
            if core.isShutDown { return [] }
            switch event {
            case .failed(let failure, let attempt, _) where core.machine.running.contains(where: { $0.attempt == attempt }):
                if let error = Self.error(of: failure) {
                    core.failure = error
                    core.lastError = ErrorBox(error)
                }
            case .succeeded(_, let attempt, _) where core.machine.running.contains(where: { $0.attempt == attempt }):
                core.failure = nil
            default:
                break
            }
            let actions = core.machine.handle(event)
            if let trace = machineTrace.withLock({ $0 }) {
                trace.body("machine: \(event) -> \(actions); pending \(core.machine.pending.map { "\($0.recordID)#\($0.rowID)\($0.isSent ? "s" : "")" }), running \(core.machine.running.map(\.attempt))")
            }
            if core.machine.account == core.state.account {
                core.state.token = core.machine.token
                core.state.zoneReady = core.machine.zoneReady
            }
            return actions
        }
        for action in actions { perform(action) }
    }

    /// The error a failure carries, as the app is told it.
    private static func error(of failure: ChangeSyncStateMachine.Failure) -> TandemError? {
        switch failure {
        case .transient(let error, _), .rateLimited(let error, _), .tooLarge(let error), .fatal(let error): error
        case .tokenExpired: TandemError(.outOfRange, "The server no longer keeps this zone's changes after the stored token; everything is fetched again from the beginning.")
        case .zoneMissing: TandemError(.notFound, "The zone was not on the server; it is made again.")
        }
    }

    /// A start: the failure that stood is cleared.
    func clearFailure() {
        step { $0.failure = nil }
    }

    private func perform(_ action: ChangeSyncStateMachine.Action) {
        switch action {
        case .run(.send(let batch, let changes), let attempt):
            // Numbered in the file and put on the wire now, in the order the machine started
            // them, before any other step: the machine holds these changes as sent from here on,
            // and a change the app queued in between must not replace one of them in the file
            // (the machine would then hold that row twice, and send it twice in one request).
            guard let account = step({ $0.machine.account }) else { return }
            startSend(batch: batch, changes: changes, account: account, attempt: attempt)
        case .run(let operation, let attempt):
            guard let account = step({ $0.machine.account }) else { return }
            Task { await self.run(operation, account: account, attempt: attempt) }
        case .wake(let at):
            let task = Task { [weak self, sleep] in
                do { try await sleep(at) } catch { return }
                guard let self else { return }
                self.owner.enqueue { self.handle(.tick(now: self.now())) }
            }
            step { core in
                core.wake?.cancel()
                core.wake = task
            }
        case .tokenReset:
            emit(.tokenUpdated(nil)) { $0.syncEngine(self, didUpdateChangeToken: nil) }
        case .halted(let error):
            step { core in
                core.lastError = ErrorBox(error)
                core.failure = error
                core.waiters.failAll(TandemError(error.code, "The engine halted before the server answered: \(error.message) The changes stay queued; start the engine to send them."))
            }
            emit(.stopped(error)) { $0.syncEngine(self, didStopWithError: error) }
        case .settled, .persist:
            break
        }
    }

    /// Whether the operation `attempt` still runs, for `account`.
    func isRunning(_ attempt: Int, account: String) -> Bool {
        step { $0.machine.account == account && $0.machine.running.contains { $0.attempt == attempt } }
    }

    /// Whether `account` is still the one the engine runs for.
    func isCurrent(_ account: String) -> Bool {
        step { $0.machine.account == account }
    }

    /// A failure that stops nothing: kept as `lastError`, for the app to see.
    func noteFailure(_ error: any Error) {
        step { $0.lastError = ErrorBox(error) }
    }

    /// Tells the delegate, then the event stream's subscribers (who then find the delegate's
    /// store up to date). Between steps: the delegate may call the engine.
    func emit(_ event: ChangeSyncEvent, _ call: (any ChangeSyncEngineDelegate) -> Void) {
        let (events, delegate, signals) = listeners.withLock { (Array($0.events.values), $0.delegate, Array($0.signals.values)) }
        if let delegate { call(delegate) }
        for subscriber in events { subscriber.yield(event) }
        signals.forEach { $0.yield() }
    }

    /// Runs an operation that waits on the server (every one but a send), off the owner; its
    /// outcome comes back as a step.
    private func run(_ operation: ChangeSyncStateMachine.Operation, account: String, attempt: Int) async {
        switch operation {
        case .createZone:
            await createZone(account, attempt: attempt)
        case .subscribe:
            await subscribe(account, attempt: attempt)
        case .send:
            break
        case .fetch(let token):
            await fetch(after: token, account: account, attempt: attempt)
        }
    }

    /// Hands the machine an operation's outcome, as a step.
    func finish(_ outcome: ChangeSyncStateMachine.Outcome, attempt: Int) {
        owner.enqueue { self.handle(.succeeded(outcome, attempt: attempt, now: self.now())) }
    }

    /// Hands the machine an operation's failure, as a step.
    func fail(_ failure: ChangeSyncStateMachine.Failure, attempt: Int) {
        owner.enqueue { self.handle(.failed(failure, attempt: attempt, now: self.now())) }
    }

    private func createZone(_ account: String, attempt: Int) async {
        do {
            let zone = try DocumentPath("users/\(account)/zones/\(configuration.zoneName)")
            _ = try await client.commit([.merge(zone, ["name": .string(configuration.zoneName)], fields: [FieldPath("name")])])
            finish(.zoneCreated, attempt: attempt)
        } catch {
            fail(Self.classify(error), attempt: attempt)
        }
    }

    /// A listener on the zone's records from the server's version now: its first batch says it is
    /// up; each later one is a push. It resumes by itself across reconnects.
    private func subscribe(_ account: String, attempt: Int) async {
        let target: ListenTarget
        let read: Version
        do {
            target = .collection(try recordsPath(account), Query())
            let zone = try DocumentPath("users/\(account)/zones/\(configuration.zoneName)")
            guard case .documents(_, _, let version) = try await client.request({ .get(id: $0, path: zone) }) else {
                throw TandemError(.internal, "The server answered a get with the wrong message.")
            }
            read = version
        } catch {
            fail(Self.classify(error), attempt: attempt)
            return
        }
        owner.enqueue {
            // Taken back meanwhile (a stop, another user): no listener.
            guard self.isRunning(attempt, account: account) else { return }
            let version = self.step { $0.state.token?.version } ?? read
            // Told versions only: the fetch reads what changed, so nothing comes twice.
            let stream = self.client.notifications(of: target, resumeFrom: version)
            let task = Task { [weak self] in
                var first = true
                do {
                    for try await _ in stream {
                        guard let self else { return }
                        let isFirst = first
                        first = false
                        self.owner.enqueue {
                            if isFirst { self.handle(.succeeded(.subscribed, attempt: attempt, now: self.now())) }
                            // A page read ahead may predate what was pushed: read again.
                            self.step { $0.dropReadAhead() }
                            self.handle(.pushed(now: self.now()))
                        }
                    }
                } catch {
                    guard let self, !Task.isCancelled else { return }
                    if first {
                        self.fail(Self.classify(error), attempt: attempt)
                        return
                    }
                    self.owner.enqueue { self.noteFailure(error) }
                }
                guard let self, !Task.isCancelled else { return }
                self.owner.enqueue { self.handle(.unsubscribed(now: self.now())) }
            }
            let old = self.step { core -> Task<Void, Never>? in
                defer { core.subscription = task }
                return core.subscription
            }
            old?.cancel()
        }
    }
}
