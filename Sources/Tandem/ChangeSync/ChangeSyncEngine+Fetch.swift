import TandemCore

/// Fetches: a page is asked for off the owner, and handled (bases stored, results told, the
/// token moved) in one step on it.
extension ChangeSyncEngine {
    /// Where a fetch starts, decided on the owner: the token (nil: from the beginning), whether it
    /// continues a read from the beginning, and the page read ahead for it, if any.
    private struct FetchStart {
        var token: ChangeToken?
        var fromStart: Bool
        var ahead: Task<ChangePage, any Error>?
    }

    func fetch(after token: ChangeToken?, account: String, attempt: Int) async {
        let start = await owner.run { Result { try self.startFetch(after: token, account: account) } }
        let page: ChangePage
        let fromStart: Bool
        do {
            let decided = try start.get()
            fromStart = decided.fromStart
            if let ahead = decided.ahead {
                page = try await ahead.value
            } else {
                page = try await readPage(after: decided.token, account: account, fromStart: fromStart)
            }
        } catch {
            fail(Self.classify(error, fetching: true), attempt: attempt)
            return
        }
        owner.enqueue { self.take(page, fromStart: fromStart, account: account, attempt: attempt) }
    }

    /// The first part of a fetch, a step: where it starts.
    private func startFetch(after token: ChangeToken?, account: String) throws -> FetchStart {
        var token = token
        // A read from 0 that an earlier run of the engine left unfinished starts over: the
        // records it brought were not kept, so its end could not tell what is gone.
        if token != nil, step({ $0.sweep?.account != account }), try store.isSweeping(account: account) {
            token = nil
        }
        if token == nil {
            step { core in
                core.dropReadAhead()
                core.sweep = Sweep(account: account)
            }
            try store.beginSweep(account: account)
        }
        return step { core in
            // The page read ahead for this token, if it was; any other is of no use now.
            var ahead: Task<ChangePage, any Error>?
            if let readAhead = core.readAhead, readAhead.account == account, readAhead.token == token {
                ahead = readAhead.page
                core.readAhead = nil
            } else {
                core.dropReadAhead()
            }
            return FetchStart(token: token, fromStart: core.sweep?.account == account, ahead: ahead)
        }
    }

    /// Handles a fetched page, as a step: its bases stored, its records told, the token moved.
    private func take(_ page: ChangePage, fromStart: Bool, account: String, attempt: Int) {
        // Another user signed in meanwhile: the page is theirs to fetch again, and told to no one.
        guard isCurrent(account) else { return }
        // The feed goes on: its next page is asked for now, and comes while this one is handled
        // (it is the fetch the machine runs next, unless a send comes first).
        if page.hasMore {
            let next = ChangeToken(page.version)
            let task = Task { try await self.readPage(after: next, account: account, fromStart: fromStart) }
            step { core in
                core.dropReadAhead()
                core.readAhead = ReadAhead(account: account, token: next, page: task)
            }
        }
        var modifications: [SyncedRecord] = []
        var deletions: [RecordDeletion] = []
        var failures: [FailedRecord] = []
        // The server's state of each record, as the page carried it (its data not encoded again).
        var bases: [(id: String, version: Version, data: String?)] = []
        bases.reserveCapacity(page.changes.count)
        modifications.reserveCapacity(page.changes.count)
        var types: [String: String] = [:]
        do {
            types = try store.baseTypes(account: account, ids: page.changes.filter { $0.document == nil }.map(\.path.id))
        } catch {
            // The deletions go on without their records' types; the app hears why.
            noteFailure(error)
        }
        for change in page.changes {
            let id = change.path.id
            guard let document = change.document else {
                deletions.append(RecordDeletion(recordID: id, recordType: types[id] ?? ""))
                bases.append((id, change.version, nil))
                continue
            }
            do {
                let record = try RecordCoding.record(id: id, fields: document.data, version: document.version, encryption: configuration.encryption)
                modifications.append(record)
                bases.append((id, document.version, change.encodedData ?? JSONText.encode(.object(document.data))))
            } catch {
                failures.append(FailedRecord(recordID: id, mutationID: nil, error: error))
            }
        }
        do {
            try store.storeBases(account: account, bases)
        } catch {
            handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now()))
            return
        }
        // Stamps seen from other devices: this one's next stamps come after them.
        let wall = configuration.wallClock()
        step { core in
            for stamp in modifications.compactMap({ $0.metadata.stamps.values.max() }) { core.clock.observe(stamp, wall: wall) }
        }
        // The end of a read from 0: what this engine knew of and the read did not bring is gone.
        if fromStart {
            let ended = step { core -> Set<String>? in
                core.sweep?.seen.formUnion(page.changes.map(\.path.id))
                guard !page.hasMore, let sweep = core.sweep, sweep.account == account else { return nil }
                core.sweep = nil
                return sweep.seen
            }
            if let seen = ended {
                do {
                    deletions += try store.endSweep(account: account, seen: seen, through: page.version)
                } catch {
                    handle(.failed(.fatal(Self.tandemError(error)), attempt: attempt, now: now()))
                    return
                }
            }
        }
        if !deletions.isEmpty { emit(.fetchedDeletions(deletions)) { $0.syncEngine(self, didFetchDeletions: deletions) } }
        // A configured size below one (which sends take as one) must not stall this loop or trap.
        let size = max(1, configuration.maxRecordsPerBatch)
        var start = 0
        while start < modifications.count {
            let chunk = Array(modifications[start..<min(start + size, modifications.count)])
            emit(.fetchedModifications(chunk)) { $0.syncEngine(self, didFetchModifications: chunk) }
            start += chunk.count
        }
        if !failures.isEmpty { emit(.fetchFailed(failures)) { $0.syncEngine(self, fetchDidFailFor: failures) } }
        // The checkpoint only after every record before it was delivered.
        let next = ChangeToken(page.version)
        handle(.succeeded(.fetched(token: next, hasMore: page.hasMore), attempt: attempt, now: now()))
        emit(.tokenUpdated(next)) { $0.syncEngine(self, didUpdateChangeToken: next) }
    }

    private func readPage(after token: ChangeToken?, account: String, fromStart: Bool) async throws -> ChangePage {
        try await client.changes(.collection(try recordsPath(account), Query()), since: token?.version ?? Version(0), limit: configuration.fetchPageSize,
                                 fromStart: fromStart)
    }

    /// How a failure is retried, split, restarted or ends the engine.
    static func classify(_ error: any Error, fetching: Bool = false) -> ChangeSyncStateMachine.Failure {
        guard let error = error as? TandemError else { return .transient(tandemError(error), retryAfter: nil) }
        switch error.code {
        case .unavailable, .aborted, .deadlineExceeded, .cancelled, .internal, .unknown:
            return .transient(error, retryAfter: error.retryAfter)
        case .resourceExhausted:
            return error.retryAfter != nil ? .rateLimited(error, retryAfter: error.retryAfter) : .tooLarge(error)
        case .outOfRange where fetching:
            return .tokenExpired
        default:
            return .fatal(error)
        }
    }

    static func tandemError(_ error: any Error) -> TandemError {
        if let error = error as? TandemError { return error }
        if let error = error as? RecordEncryptionError { return TandemError.invalidArgument(error.description) }
        return TandemError(.internal, "\(error)")
    }
}
