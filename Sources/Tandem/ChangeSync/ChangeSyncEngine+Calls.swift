import Synchronization
import TandemCore

/// What became of one record of a ``ChangeSyncEngine/send(modify:delete:)-([SyncedRecord],_)``.
public enum SendOutcome: Sendable {
    /// Saved: the record as the server has it now (its version in its metadata), which is the
    /// conflict's resolution when it met one, or the newer state of it the app queued meanwhile.
    case saved(SentRecord)
    /// Deleted on the server.
    case deleted(SentDeletion)
    /// Failed for good (refused, of an unknown outcome, or of a record the server no longer has):
    /// no longer queued, and the app's to handle.
    case failed(FailedRecord)

    /// The id of the record this outcome is of.
    public var recordID: String {
        switch self {
        case .saved(let sent): sent.record.id
        case .deleted(let deletion): deletion.recordID
        case .failed(let failure): failure.recordID
        }
    }
}

extension ChangeSyncEngine {
    // MARK: The app's calls

    /// Runs the engine (again, after a halt: with no failure counted).
    public func start() {
        owner.enqueue {
            self.accountChanged(self.client.authState.uid)
            self.clearFailure()
            self.handle(.start(now: self.now()))
        }
    }

    /// Stops the engine: nothing runs until ``start()``; everything queued stays queued (on disk),
    /// the operation running included, and an answer to it is not taken. Each
    /// ``send(modify:delete:)-([SyncedRecord],_)`` awaited ends with a `cancelled` error (its changes stay queued).
    public func stop() {
        owner.enqueue {
            let subscription = self.step { core -> Task<Void, Never>? in
                defer { core.subscription = nil }
                core.wake?.cancel()
                core.wake = nil
                core.dropReadAhead()
                core.waiters.failAll(TandemError(.cancelled, "The engine was stopped before the server answered; the changes stay queued, and go once it is started."))
                return core.subscription
            }
            subscription?.cancel()
            self.handle(.stop)
            self.handle(.unsubscribed(now: self.now()))
        }
    }

    /// Queues records to save and records to delete, durably: they are in the engine's file when
    /// this returns, and are sent while the engine runs, in order, each exactly once. A record
    /// queued again before it is sent is sent once, as it is last. Throws, queueing nothing, when
    /// nobody is signed in, or a record cannot be stored (its id, a property's name, an encrypted
    /// property with no keys).
    ///
    /// Blocks the caller until the changes are on disk: it waits for the engine's queue and a
    /// flush of its file. ``enqueue(modify:delete:)-([SyncedRecord],_)`` is the same without holding a thread.
    public func sendChanges<Record: SyncableRecord>(modify records: [Record], delete deletedIDs: [String]) throws {
        try sendChanges(modify: records.map(SyncedRecord.init), delete: deletedIDs.map { RecordDeletion(recordID: $0, recordType: Record.recordType) })
    }

    /// As above, for records of any types.
    public func sendChanges(modify records: [SyncedRecord], delete deletions: [RecordDeletion]) throws {
        try validate(records, deletions)
        _ = try owner.syncOrHere { try queueChanges(records, deletions) }
    }

    /// As ``sendChanges(modify:delete:)-([SyncedRecord],_)``, suspending instead of blocking: returns once the changes
    /// are on disk.
    public func enqueue<Record: SyncableRecord>(modify records: [Record], delete deletedIDs: [String]) async throws {
        try await enqueue(modify: records.map(SyncedRecord.init), delete: deletedIDs.map { RecordDeletion(recordID: $0, recordType: Record.recordType) })
    }

    /// As above, for records of any types.
    public func enqueue(modify records: [SyncedRecord], delete deletions: [RecordDeletion]) async throws {
        try validate(records, deletions)
        _ = try await owner.run { Result { try self.queueChanges(records, deletions) } }.get()
    }

    /// Queues the changes as ``enqueue(modify:delete:)-([SyncedRecord],_)`` does, then waits for the server's answer
    /// to each: the outcome of every record given, in order (saves, then deletions). The wait lives
    /// through retries, reconnects and splits of a batch; a conflict's outcome is its resolution's.
    ///
    /// Throws at once, queueing nothing, when the engine is halted (start it), nobody is signed in,
    /// or a record cannot be stored. Throws later, with the changes still queued, when the engine
    /// halts, stops or is released, another user signs in, or the task is cancelled.
    public func send<Record: SyncableRecord>(modify records: [Record], delete deletedIDs: [String]) async throws -> [SendOutcome] {
        try await send(modify: records.map(SyncedRecord.init), delete: deletedIDs.map { RecordDeletion(recordID: $0, recordType: Record.recordType) })
    }

    /// As above, for records of any types.
    public func send(modify records: [SyncedRecord], delete deletions: [RecordDeletion]) async throws -> [SendOutcome] {
        try validate(records, deletions)
        try Task.checkCancellation()
        let ticket = SendTicket()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                ticket.hold(continuation)
                owner.enqueue {
                    do {
                        if let error = self.step({ core in core.machine.isHalted ? core.lastError?.error ?? core.failure : nil }) {
                            throw TandemError(.failedPrecondition, "The engine is halted (\(ChangeSyncEngine.tandemError(error).message)); nothing was queued. Start it, then send again.")
                        }
                        guard !ticket.isCancelled else { throw CancellationError() }
                        let (account, rows) = try self.queueChanges(records, deletions)
                        self.step { $0.waiters.add(ticket, account: account, rows: rows.map(\.rowID)) }
                    } catch {
                        ticket.finish(.failure(error))
                    }
                }
            }
        } onCancel: {
            ticket.finish(.failure(CancellationError()))
            owner.enqueue { self.step { $0.waiters.remove(ticket) } }
        }
    }

    /// Fetches the changes after `token` (nil: every record), page by page. A fetch for a token
    /// already queued is not queued twice. Asked while nobody is signed in, it runs when someone
    /// signs in (from the beginning, when that is another user than the state's).
    public func fetchChanges(token: ChangeToken?) {
        owner.enqueue {
            let waiting = self.step { core -> Bool in
                guard core.machine.account == nil else { return false }
                core.fetchesAtSignIn.append((token, core.state.account))
                return true
            }
            if !waiting { self.handle(.fetch(token, now: self.now())) }
        }
    }

    // MARK: Queueing

    /// Checks what only the records themselves decide, on the caller's thread.
    private func validate(_ records: [SyncedRecord], _ deletions: [RecordDeletion]) throws {
        for record in records { try RecordCoding.validate(record, encryption: configuration.encryption) }
        for deletion in deletions where !RecordFields.isValidID(deletion.recordID) {
            throw TandemError.invalidArgument("'\(deletion.recordID)' cannot name a record: ids are not empty, hold no '/', and are not '.' or '..'.")
        }
    }

    /// Stamps and queues changes for the account signed in now, in the file and the machine, in
    /// one step: no user switch comes between. Returns the account and the rows queued.
    private func queueChanges(_ records: [SyncedRecord], _ deletions: [RecordDeletion]) throws -> (String, [ChangeQueueStore.Row]) {
        guard !step({ $0.isShutDown }) else {
            throw TandemError(.failedPrecondition, "A newer engine of this zone took this one's file over: this engine queues and sends nothing more, and the changes were not queued. Use the newer engine.")
        }
        // Who the client says is signed in now, even before its stream of sign-ins told the engine.
        accountChanged(client.authState.uid)
        guard let account = step({ $0.machine.account }) else {
            throw TandemError(.unauthenticated, "Nobody is signed in: a change belongs to a user's account. Sign in, then send it.")
        }
        // Each property the app changed gets a new stamp; the others keep theirs. Changed since the
        // newest state this device queued of the record, while one is queued (its send may not be
        // answered yet), else since the server's state.
        let ids = records.map(\.id)
        var bases = try store.newestQueued(account: account, ids: ids)
        for (id, base) in try store.bases(account: account, ids: ids.filter { bases[$0] == nil }, encryption: configuration.encryption) { bases[id] = base }
        let wall = configuration.wallClock()
        let stamped = step { core in
            records.map { record -> SyncedRecord in
                var record = record
                let base = bases[record.id]
                var stamps = base?.metadata.stamps ?? [:]
                for (name, value) in record.properties where base?.properties[name] != value {
                    stamps[name] = core.clock.stamp(wall: wall)
                }
                // A property removed is a change too.
                for name in base?.properties.keys ?? [:].keys where record.properties[name] == nil {
                    stamps[name] = core.clock.stamp(wall: wall)
                }
                record.metadata.stamps = stamps
                return record
            }
        }
        let rows = try store.enqueue(account: account, saves: stamped, deletions: deletions.map { ($0.recordID, $0.recordType) })
        afterQueueing.withLock { $0 }?.body()
        handle(.enqueue(rows.map(\.change), now: now()), for: account)
        return (account, rows)
    }
}

/// One awaited ``ChangeSyncEngine/send(modify:delete:)-([SyncedRecord],_)``: its continuation, resumed exactly once
/// (by the outcome, a failure or the task's cancellation, whichever comes first).
final class SendTicket: Sendable {
    private enum Stage {
        case waiting(CheckedContinuation<[SendOutcome], any Error>?)
        case finished
    }

    private let stage = Mutex<Stage>(.waiting(nil))

    func hold(_ continuation: CheckedContinuation<[SendOutcome], any Error>) {
        let done = stage.withLock { stage -> Bool in
            guard case .waiting = stage else { return true }
            stage = .waiting(continuation)
            return false
        }
        // Cancelled before it was held: it ends at once.
        if done { continuation.resume(throwing: CancellationError()) }
    }

    /// Whether the ticket ended (cancelled, most likely) before it was answered.
    var isCancelled: Bool { stage.withLock { if case .finished = $0 { true } else { false } } }

    func finish(_ result: Result<[SendOutcome], any Error>) {
        let continuation = stage.withLock { stage -> CheckedContinuation<[SendOutcome], any Error>? in
            guard case .waiting(let continuation) = stage else { return nil }
            stage = .finished
            return continuation
        }
        continuation?.resume(with: result)
    }
}

/// The sends the app awaits, by the rows of their changes: each row's outcome is recorded as the
/// server's answer settles it, and a send is answered when every row of it is.
struct SendWaiters {
    private struct Waiter {
        var ticket: SendTicket
        var account: String
        /// The rows in the order of the records given (a record given twice is one row).
        var rows: [Int64]
        var outcomes: [Int64: SendOutcome] = [:]
    }

    private var waiters: [ObjectIdentifier: Waiter] = [:]
    private var byRow: [Int64: Set<ObjectIdentifier>] = [:]

    var isEmpty: Bool { waiters.isEmpty }

    /// The rows some send awaits.
    func isAwaited(_ rowID: Int64) -> Bool { byRow[rowID] != nil }

    mutating func add(_ ticket: SendTicket, account: String, rows: [Int64]) {
        let id = ObjectIdentifier(ticket)
        waiters[id] = Waiter(ticket: ticket, account: account, rows: rows)
        for row in rows { byRow[row, default: []].insert(id) }
        // Nothing to wait for (no record given): answered at once.
        if rows.isEmpty { finish(id) }
    }

    mutating func remove(_ ticket: SendTicket) {
        let id = ObjectIdentifier(ticket)
        guard let waiter = waiters.removeValue(forKey: id) else { return }
        for row in waiter.rows { drop(id, from: row) }
    }

    /// The row's change was answered: `outcome` for every send awaiting it.
    mutating func decide(_ rowID: Int64, _ outcome: SendOutcome) {
        guard let ids = byRow.removeValue(forKey: rowID) else { return }
        for id in ids {
            waiters[id]?.outcomes[rowID] = outcome
            if let waiter = waiters[id], waiter.rows.allSatisfy({ waiter.outcomes[$0] != nil }) { finish(id) }
        }
    }

    /// The row's change goes on as another row (a conflict's resolution, a newer change of the
    /// record that replaced it): its sends await that one.
    mutating func move(_ rowID: Int64, to newRowID: Int64) {
        guard rowID != newRowID, let ids = byRow.removeValue(forKey: rowID) else { return }
        for id in ids {
            guard var waiter = waiters[id] else { continue }
            waiter.rows = waiter.rows.map { $0 == rowID ? newRowID : $0 }
            waiters[id] = waiter
            byRow[newRowID, default: []].insert(id)
        }
    }

    /// Ends every send awaited (or those of `account` only) with `error`.
    mutating func failAll(_ error: any Error, account: String? = nil) {
        for (id, waiter) in waiters where account == nil || waiter.account == account {
            waiters.removeValue(forKey: id)
            for row in waiter.rows { drop(id, from: row) }
            waiter.ticket.finish(.failure(error))
        }
    }

    /// Ends every send awaited for another account than `account`.
    mutating func failOthers(than account: String?, _ error: any Error) {
        for (id, waiter) in waiters where waiter.account != account {
            waiters.removeValue(forKey: id)
            for row in waiter.rows { drop(id, from: row) }
            waiter.ticket.finish(.failure(error))
        }
    }

    private mutating func finish(_ id: ObjectIdentifier) {
        guard let waiter = waiters.removeValue(forKey: id) else { return }
        for row in waiter.rows { drop(id, from: row) }
        waiter.ticket.finish(.success(waiter.rows.compactMap { waiter.outcomes[$0] }))
    }

    private mutating func drop(_ id: ObjectIdentifier, from row: Int64) {
        byRow[row]?.remove(id)
        if byRow[row]?.isEmpty == true { byRow.removeValue(forKey: row) }
    }
}
