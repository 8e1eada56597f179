import TandemCore

/// Sends: a batch is numbered and stored on the owner, put on the wire, and its answer settled
/// there again.
extension ChangeSyncEngine {
    /// Gives a send its mutations (stored before anything is sent) and puts it on the wire; its
    /// answer is awaited apart, so the next send can go meanwhile. A step on the owner.
    func startSend(batch: Int, changes: [ChangeSyncStateMachine.PendingChange], account: String, attempt: Int) {
        // Taken back meanwhile (a send beside it failed, the engine stopped): its changes are queued
        // again, and go in their turn. Numbered and sent now, they could reach the server ahead of
        // the lower sequences sent again before them.
        guard isRunning(attempt, account: account) else { return }
        // The client is another user's already (the engine hears it in a step queued after this
        // one): sent now, the account's changes would go under that user's connection.
        let signedIn = client.authState.uid
        guard signedIn == account else {
            accountChanged(signedIn)
            return
        }
        // A send beside others goes only on the socket the first of them went on, right behind
        // it: on another (the connection came back between the two), this one's later sequences
        // could reach the server ahead of the earlier ones, which the server would then refuse
        // for good as out of order. When it cannot, it fails unsent, and all go again, in order.
        let (first, socket) = step { core -> (Bool, Int?) in
            let first = core.machine.running.first?.attempt == attempt
            if first { core.roundSocket = nil }
            return (first, core.roundSocket)
        }
        let rows: [ChangeQueueStore.Row]
        do {
            let encryption = configuration.encryption
            rows = try store.prepare(account: account, records: try recordsPath(account), rowIDs: changes.map(\.rowID)) { row in
                guard let record = row.record else {
                    // Never read as a deletion: the queued state cannot be read, so nothing is sent.
                    throw TandemError(.dataLoss, "The queued change of record '\(row.recordID)' cannot be read from the engine's file; nothing of it was sent. Send the record again.")
                }
                return try RecordCoding.fields(of: record, encryption: encryption)
            }
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now()))
            return
        }
        guard !rows.isEmpty else {
            handle(.succeeded(.sent(batch: batch), attempt: attempt, now: now()))
            return
        }
        // Numbered even when it does not go: the machine holds its changes as sent from now on (a
        // newer change of one of its records is queued behind it, never in its place).
        guard first || socket != nil else {
            handle(.failed(.transient(TandemError(.unavailable, "A send before this one did not go out on an open connection; this one goes again behind it."), retryAfter: nil), attempt: attempt, now: now()))
            return
        }
        // Atomic, unless a change in it goes one by one: one decision for the batch, at one version
        // (the server decides a request that is not atomic as one request per change). Brief:
        // the engine has what it sent, and needs only the versions.
        var request = WriteRequest(rows.map { $0.mutation! }, isAtomic: !rows.contains { $0.alone })
        request.isBrief = true
        // Sent only on a connection signed in as the account (a sign-in the engine has not heard
        // yet fails it as unavailable, and it stays queued for its account).
        request.madeFor = .some(account)
        let writes = client.startWrites([request], onlyOn: first ? nil : socket)
        if first { step { $0.roundSocket = writes.socket } }
        Task { await self.finishSend(batch, rows, writes, account: account, attempt: attempt) }
    }

    /// The changes of rows, one per row, each as its last mention has it: two resolutions of one
    /// record (two of its changes met conflicts in one send) are queued as one row, which the
    /// file replaced in place, and the machine must hear of it once (twice, it sent the row twice
    /// in one request, under two sequences, and the second met a conflict of its own).
    static func distinct(_ rows: [ChangeQueueStore.Row]) -> [ChangeSyncStateMachine.PendingChange] {
        var index: [Int64: Int] = [:]
        var changes: [ChangeSyncStateMachine.PendingChange] = []
        for row in rows {
            if let at = index[row.rowID] {
                changes[at] = row.change
            } else {
                index[row.rowID] = changes.count
                changes.append(row.change)
            }
        }
        return changes
    }

    /// What a send's answer says of each change, before the engine acts on it.
    private struct Answer {
        var saved: [SentRecord] = []
        var deleted: [SentDeletion] = []
        var failed: [FailedRecord] = []
        var conflicts: [(row: ChangeQueueStore.Row, server: SyncedRecord?)] = []
        /// What each answered change leaves as the server's state of its record, in order.
        var settlements: [(rowID: Int64, settlement: ChangeQueueStore.Settlement)] = []
        /// Refused where an atomic request decided it: maybe for another change's sake. Sent
        /// again, one by one, under a new id, to learn its own fate.
        var undecided: [Int64] = []
        /// The record of each undecided change.
        var undecidedRecords: [Int64: String] = [:]
        /// Each decided change's outcome, for the sends the app awaits.
        var outcomes: [(rowID: Int64, outcome: SendOutcome)] = []

        /// The change failed for good: it leaves the queue, the record's base as it was.
        mutating func fail(_ row: ChangeQueueStore.Row, _ failure: FailedRecord) {
            failed.append(failure)
            settlements.append((row.rowID, .unchanged))
            outcomes.append((row.rowID, .failed(failure)))
        }
    }

    /// Takes a send's answer: results, conflicts and failures told, its changes settled.
    private func finishSend(_ batch: Int, _ rows: [ChangeQueueStore.Row], _ writes: TandemClient.PendingWrites, account: String, attempt: Int) async {
        let acknowledgements: [WriteAcknowledgement]
        switch await writes.acknowledgements()[0] {
        case .failure(let error):
            owner.enqueue {
                // An answer to a send the machine took back is not taken (it is sent again).
                guard self.isRunning(attempt, account: account) else { return }
                self.handle(.failed(Self.classify(error), attempt: attempt, now: self.now()))
            }
            return
        case .success(let answered):
            acknowledgements = answered
        }
        var answer = Answer()
        answer.settlements.reserveCapacity(rows.count)
        // Sent atomic unless a change in it goes one by one (startSend): then the server decided
        // each change on its own, and a refusal is that change's own.
        let atomic = !rows.contains { $0.alone }
        for (row, acknowledgement) in zip(rows, acknowledgements) {
            let id = row.mutation!.id!
            if acknowledgement.status == .refused, atomic {
                answer.undecided.append(row.rowID)
                answer.undecidedRecords[row.rowID] = row.recordID
                continue
            }
            switch acknowledgement.status {
            case .applied, .replayed:
                if row.isDeletion {
                    let deletion = SentDeletion(recordID: row.recordID, recordType: row.recordType, mutationID: id)
                    answer.deleted.append(deletion)
                    answer.settlements.append((row.rowID, .gone))
                    answer.outcomes.append((row.rowID, .deleted(deletion)))
                } else {
                    if var record = row.record {
                        record.metadata.version = acknowledgement.version
                        let sent = SentRecord(record: record, mutationID: id)
                        answer.saved.append(sent)
                        answer.outcomes.append((row.rowID, .saved(sent)))
                    }
                    answer.settlements.append((row.rowID, .sent(acknowledgement.version)))
                }
            case .refused where acknowledgement.error?.code == .failedPrecondition && !row.isDeletion:
                // Changed on the server since the version it was based on: the server's record now.
                // The refusal carries it; a plain write's refusal (one change) does not, so it is read.
                do {
                    var current = acknowledgement.document
                    if current == nil { current = try await client.document(at: row.mutation!.path) }
                    let server = try current.map {
                        try RecordCoding.record(id: row.recordID, fields: $0.data, version: $0.version, encryption: configuration.encryption)
                    }
                    answer.settlements.append((row.rowID, current.map { .server($0.version, JSONText.encode(.object($0.data))) } ?? .gone))
                    answer.conflicts.append((row, server))
                } catch {
                    if case .transient = Self.classify(error) {
                        // The server's record could not be read (the connection went): the change
                        // was not applied, and goes again under a new id, to meet the conflict
                        // again. Failed for good, a passing failure would have lost it.
                        answer.undecided.append(row.rowID)
                        answer.undecidedRecords[row.rowID] = row.recordID
                    } else {
                        answer.fail(row, FailedRecord(recordID: row.recordID, mutationID: id, error: error))
                    }
                }
            case .refused, .unknown:
                answer.fail(row, FailedRecord(recordID: row.recordID, mutationID: id,
                                              error: acknowledgement.error ?? TandemError(.unknown, "The server no longer knows whether this change of '\(row.recordID)' applied; read the record.")))
            }
        }
        let answered = answer
        owner.enqueue { self.settle(answered, batch: batch, account: account, attempt: attempt) }
    }

    /// Acts on a send's answer, as a step: conflicts resolved, the changes settled in the file (and
    /// resolutions queued in the same transaction), results told.
    private func settle(_ answer: Answer, batch: Int, account: String, attempt: Int) {
        // An answer to a send the machine took back (it is queued again, and will be sent again
        // with the same ids, and answered the same) is not taken: acting on it beside the send
        // again would settle, or send once more, what that one will. Nor is one of another user's
        // (the app's store and resolver are the other user's now): the changes stay queued for
        // their account, with their mutation ids, and are answered the same when it is back.
        guard isRunning(attempt, account: account) else { return }
        var answer = answer
        // Conflicts: the chosen record goes next; a record the server no longer has is reported.
        var resolved: [SyncedRecord] = []
        var unresolved: [(RecordConflict, SyncedRecord)] = []
        var resolutions: [(RecordConflict, SyncedRecord)] = []
        var conflicted: [String: Int64] = [:]
        let delegate = self.delegate
        var baseRecords: [String: SyncedRecord] = [:]
        do {
            baseRecords = try store.bases(account: account, ids: answer.conflicts.map(\.row.recordID), encryption: configuration.encryption)
        } catch {
            // The conflicts go on without their base; the app hears why.
            noteFailure(error)
        }
        var conflictList: [RecordConflict] = []
        for (row, server) in answer.conflicts {
            guard let client = row.record else { continue }
            guard let server else {
                let failure = FailedRecord(recordID: row.recordID, mutationID: row.mutation?.id,
                                           error: TandemError(.notFound, "Record '\(row.recordID)' is no longer on the server: it was deleted there after the version this change was based on. Nothing was changed on this device; save it again as a new record, or delete it."))
                answer.failed.append(failure)
                answer.outcomes.append((row.rowID, .failed(failure)))
                continue
            }
            let conflict = RecordConflict(base: baseRecords[row.recordID], client: client, server: server)
            conflictList.append(conflict)
            conflicted[row.recordID] = row.rowID
            let choice = delegate.map { $0.syncEngine(self, shouldResolveConflict: conflict) } ?? configuration.resolver.resolve(conflict)
            if var choice {
                choice.id = client.id
                choice.metadata.version = server.metadata.version
                resolved.append(choice)
                resolutions.append((conflict, choice))
            } else {
                // Queued again as it was: after a start, it meets the conflict again.
                unresolved.append((conflict, client))
            }
        }
        do {
            // One transaction: a conflicted change never leaves the queue without its resolution
            // in it. A record the app changed again meanwhile keeps its newer change, which meets
            // the conflict in its turn.
            let (again, requeued) = try store.settle(account: account, answer.settlements, undecided: answer.undecided, requeue: resolved + unresolved.map(\.1))
            // A change that goes on as another row (a conflict's resolution, or a newer change of
            // its record that replaced it) is awaited as that row.
            var moves: [(from: Int64, to: Int64)] = []
            if step({ !$0.waiters.isEmpty }) {
                let replaced = answer.undecided.filter { rowID in !again.contains { $0.rowID == rowID } }.compactMap { rowID in answer.undecidedRecords[rowID].map { (rowID, $0) } }
                for (rowID, recordID) in replaced + conflicted.map({ ($0.value, $0.key) }) {
                    if let newer = try requeued.first(where: { $0.recordID == recordID })?.rowID ?? store.newestRow(account: account, recordID: recordID) {
                        moves.append((rowID, newer))
                    }
                }
            }
            step { core in
                for (rowID, outcome) in answer.outcomes { core.waiters.decide(rowID, outcome) }
                for move in moves { core.waiters.move(move.from, to: move.to) }
            }
            if !again.isEmpty || !requeued.isEmpty { handle(.resolved(Self.distinct(again + requeued), now: now()), for: account) }
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now()))
            return
        }
        let (saved, deleted, failed) = (answer.saved, answer.deleted, answer.failed)
        let results = SendResults(batch: batch, saved: saved, deleted: deleted, conflicts: conflictList, failed: failed)
        emit(.sent(results)) { delegate in
            if !saved.isEmpty { delegate.syncEngine(self, didSendModifications: saved, batch: batch) }
            if !deleted.isEmpty { delegate.syncEngine(self, didSendDeletions: deleted, batch: batch) }
        }
        for (conflict, choice) in resolutions { emit(.conflictResolved(conflict, choice)) { _ in } }
        if !failed.isEmpty {
            emit(.sendFailed(batch: batch, failed)) { $0.syncEngine(self, sendDidFailFor: failed, batch: batch) }
        }
        handle(.succeeded(.sent(batch: batch), attempt: attempt, now: now()))
        if let (conflict, _) = unresolved.first {
            handle(.unresolved(TandemError(.aborted, "The conflict on record '\(conflict.client.id)' (server version \(conflict.server.metadata.version)) was left unresolved; the change stays queued. Resolve it (delegate or resolver), then start the engine.")))
        }
    }
}
