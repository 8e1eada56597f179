import Foundation
import TandemCore

/// The store-independent meaning of a commit: what to check, in which order, what to apply, what
/// to record and what to answer, over any store's ``StoreTransaction``.
///
/// A store checks each request first with ``check(_:limits:)`` (no transaction needed, so it runs
/// before the request queues for the writer), then decides the checked requests one by one in its
/// write transaction with ``decide(_:in:version:committed:clientID:)``.
///
/// The rules, for a request's mutations:
/// 1. A mutation without an id is new. One whose id is above its client's newest recorded sequence
///    is new. Otherwise its record answers it: `replayed` with the first answer, or `refused` with
///    the first error — unless the content differs (`invalid-argument`: an id reused for another
///    write). An id with no record is `unknown` when pruning removed its record, and refused as out
///    of order when it was never decided (a client's sequences must increase).
/// 2. The new mutations apply together, at the request's version, when every other mutation of the
///    request is applied (now or before); otherwise they are refused with the request.
/// 3. They apply in order against the documents as the earlier ones left them: a failed
///    precondition, an update of a missing document, a document over the size limit or a write
///    the ``authorizer`` refuses refuses the request, and nothing of it is written. A refusal tells
///    only of committed state: when a precondition (or an update's need of a document) fails on
///    what an earlier mutation of the request left, which nobody committed, its error names that
///    mutation instead of the state, and it carries the document as committed before the request.
/// 4. Every decision about an id — applied or refused — is recorded with the mutation's digest.
public struct CommitPlanner: Sendable {
    /// The limits documents are checked against once written.
    public var limits: ServerLimits
    /// The commit's time: documents' update times, `serverTimestamp`, the records' time.
    public var time: ServerTime
    /// Decides each new mutation against the documents before and after it; nil allows all.
    public var authorizer: WriteAuthorizer?

    /// A planner that checks documents against `limits`, writes at `time`, and asks `authorizer`
    /// about each new mutation (nil allows every one).
    public init(limits: ServerLimits, time: ServerTime, authorizer: WriteAuthorizer? = nil) {
        self.limits = limits
        self.time = time
        self.authorizer = authorizer
    }

    /// A request that passed ``check(_:limits:)``, with its mutations' digests.
    public struct CheckedRequest: Sendable {
        /// The request's mutations, in the order sent.
        public let mutations: [Mutation]
        let digests: [UInt64?]
    }

    /// Checks what does not depend on stored state: the batch size and path depth, each mutation's
    /// shape, and that no id repeats and each client's sequences increase within the request.
    /// Throws `invalid-argument` or `resource-exhausted`; such a request is never recorded, since
    /// it would fail the same way whenever it was sent.
    public static func check(_ mutations: [Mutation], limits: ServerLimits) throws(TandemError) -> CheckedRequest {
        try limits.checkBatch(mutations)
        var digests: [UInt64?] = []
        digests.reserveCapacity(mutations.count)
        var lastSequence: [String: UInt64] = [:]
        for mutation in mutations {
            try mutation.validate()
            if let id = mutation.id {
                if let last = lastSequence[id.clientID], id.sequence <= last {
                    throw TandemError.invalidArgument(id.sequence == last
                        ? "The mutation id \(id) appears twice in one write; give each mutation its own sequence."
                        : "The mutation ids of client \(id.clientID) go down within one write (\(last), then \(id.sequence)); list a client's mutations in the order of their sequences.")
                }
                lastSequence[id.clientID] = id.sequence
                digests.append(mutation.contentDigest)
            } else {
                digests.append(nil)
            }
        }
        return CheckedRequest(mutations: mutations, digests: digests)
    }

    /// Decides a checked request in `transaction`: its new mutations take `version` if they apply;
    /// `committed` is the version before it (the one a refusal or an unknown answer carries).
    ///
    /// `clientID` is the connection client sending it (nil for a request that stands alone, such
    /// as one over HTTP). Each writer id (the client of a mutation id) belongs to the connection
    /// client that first wrote under it: a request using a writer id another client owns fails
    /// with `permission-denied`, undecided, and nothing is recorded against that id.
    ///
    /// Throws only what the transaction throws, which must fail the whole commit.
    public func decide<Transaction: StoreTransaction>(
        _ request: CheckedRequest, in transaction: inout Transaction, version: Version, committed: Version, clientID: String? = nil
    ) throws -> Result<CommitResult, TandemError> {
        let mutations = request.mutations
        var unclaimed: [String] = []
        for writer in Set(mutations.compactMap(\.id?.clientID)) {
            guard let owner = try transaction.owner(of: writer) else {
                unclaimed.append(writer)
                continue
            }
            if owner != clientID, !(clientID.map { Principal.isLegacyAnonymousOwner(owner, of: $0) } ?? false) {
                return .failure(TandemError(.permissionDenied, "The writer id '\(writer)' belongs to another client; a connection may only write under writer ids it used first. Nothing was written."))
            }
        }
        if let clientID {
            for writer in unclaimed.sorted() { try transaction.claim(writer, for: clientID) }
        }
        var answers = [WriteAcknowledgement?](repeating: nil, count: mutations.count)
        var fresh: [Int] = []
        // Why the new mutations cannot apply, when another mutation of the request did not apply.
        var blocker: TandemError?
        // Refusals decided here about ids that had no record: recorded below.
        var toRecord: [Int] = []

        for (index, mutation) in mutations.enumerated() {
            guard let id = mutation.id else {
                fresh.append(index)
                continue
            }
            let newest = try transaction.highestRecordedSequence(of: id.clientID)
            if newest.map({ id.sequence > $0 }) ?? true {
                fresh.append(index)
                continue
            }
            if let record = try transaction.record(of: id) {
                if let digest = record.digest, digest != request.digests[index] {
                    let error = TandemError.invalidArgument("The mutation id \(id) was already used for another write (decided at version \(record.acknowledgement.version)); nothing was written. Give every write a new sequence.")
                    answers[index] = .refused(id, error, at: committed)
                    blocker = blocker ?? error
                    continue
                }
                let answer = record.acknowledgement.replayed
                answers[index] = answer
                // The new mutations beside it cannot apply, now or on any later send: refused for
                // good (a passing code would have the client send the request again forever).
                switch answer.status {
                case .applied, .replayed:
                    break
                case .refused:
                    blocker = blocker ?? TandemError(.failedPrecondition, "Mutation \(id) of this write was refused before (\(answer.error.map { "\($0.code): \($0.message)" } ?? "no reason kept")), so nothing new of the write was written. Send the new mutations in a write of their own.")
                case .unknown:
                    blocker = blocker ?? Self.undecidable(id)
                }
            } else if let pruned = try transaction.prunedSequence(of: id.clientID), id.sequence <= pruned {
                answers[index] = WriteAcknowledgement(id: id, status: .unknown, version: committed)
                blocker = blocker ?? Self.undecidable(id)
            } else {
                let error = TandemError.invalidArgument("Mutation \(id) arrived after \(id.clientID)#\(newest ?? 0) was decided and was never applied: a client's sequences must increase in the order it sends its writes. Nothing was written; send the write again with a new sequence.")
                answers[index] = .refused(id, error, at: committed)
                toRecord.append(index)
                blocker = blocker ?? error
            }
        }
        // What the new mutations do, or why the request is refused.
        var outcome: Result<Applied, Refusal> = .failure(Refusal(error: blocker ?? TandemError(.internal, "")))
        if !fresh.isEmpty, blocker == nil {
            outcome = try apply(fresh.map { mutations[$0] }, numbered: fresh, in: &transaction, version: version)
        }
        var batch: CommittedBatch?
        switch outcome {
        case .success(let applied):
            for (index, acknowledgement) in zip(fresh, applied.acknowledgements) {
                answers[index] = acknowledgement
                if acknowledgement.id != nil { toRecord.append(index) }
            }
            try transaction.applied(version: version, changedDocuments: !applied.changes.isEmpty)
            batch = CommittedBatch(version: version, changes: applied.changes)
        case .failure(let refusal) where !fresh.isEmpty:
            for index in fresh {
                answers[index] = .refused(mutations[index].id, refusal.error, at: committed)
                if mutations[index].id != nil { toRecord.append(index) }
            }
            // The mutation whose version or existence did not hold is answered with the document
            // as committed before the request (when its caller may read it; none when there was
            // none): a client resolves the conflict without a read.
            if let position = refusal.position, let current = refusal.current {
                answers[fresh[position]]?.document = current
            }
        case .failure:
            break
        }
        for index in toRecord.sorted() {
            guard let id = mutations[index].id, var answer = answers[index] else { continue }
            // A refusal is kept without the document it was answered with: that was then.
            if answer.status == .refused { answer.document = nil }
            try transaction.record(MutationRecord(acknowledgement: answer, digest: request.digests[index], time: time.date), for: id)
        }
        return .success(CommitResult(acknowledgements: answers.map { $0! }, batch: batch))
    }

    /// Why new mutations beside one whose answer is no longer known cannot apply.
    private static func undecidable(_ id: MutationID) -> TandemError {
        TandemError(.failedPrecondition, "Mutation \(id) of this write was decided too long ago for its answer to be kept, so nothing new of the write was written. Read the documents, then send the new mutations in a write of their own.")
    }

    /// The refusal of `mutation`, whose precondition, or (`not-found`) need of a document, failed
    /// on what the request's mutation `earlier` (its place, from 0) left at its path (`left`): its
    /// own `error` would describe that state, which nobody committed, with the version the request
    /// would have taken. This one names the earlier mutation instead, and no version of the server's.
    private static func metEarlierWrite(_ mutation: Mutation, error: TandemError, left: Document?, by earlier: Int) -> TandemError {
        let path = mutation.path
        let met = "write \(earlier + 1) of the same batch \(left == nil ? "deletes" : "writes") it first"
        if error.code == .notFound {
            return TandemError(.notFound, "Cannot update \(path): \(met), and an update needs the document. Nothing was written; remove the update, or make it a set (or a set with merge), which creates the document.")
        }
        let expected: String
        switch mutation.precondition {
        case .exists(let exists)?: expected = exists ? "must exist for this write" : "must not exist for this write"
        case .version(let version)?: expected = "was expected at version \(version) by this write"
        case nil: expected = "did not hold the precondition of this write"
        }
        return TandemError(.failedPrecondition, "\(path) \(expected), but \(met): a precondition is checked against the document as the earlier writes of its batch leave it. Nothing was written; to check the document as committed, put the precondition on the first write to \(path) in the batch.")
    }

    private struct Applied {
        var acknowledgements: [WriteAcknowledgement]
        var changes: [RemoteChange]
    }

    /// Why new mutations were refused: the error, which of them met it, and, for a precondition
    /// that did not hold on a document the caller may read, that document as committed before the
    /// request (nil when there was none).
    private struct Refusal: Error {
        var error: TandemError
        var position: Int?
        var current: Document?
    }

    /// Applies new mutations in order against the documents as the earlier ones leave them, and
    /// writes the result; refuses them all, writing nothing, if one is refused. `numbers` are
    /// their places in the request (from 0), for an error that names one.
    private func apply<Transaction: StoreTransaction>(_ mutations: [Mutation], numbered numbers: [Int], in transaction: inout Transaction,
                                                      version: Version) throws -> Result<Applied, Refusal> {
        // Each document as committed before the request (read once), and as the mutations so far
        // leave it, with the last of them to change it: a refusal tells of the first, never of
        // the second, which nobody committed (its version is the one the request would take).
        var committed: [DocumentPath: Document?] = [:]
        var working: [DocumentPath: Document?] = [:]
        var changedBy: [DocumentPath: Int] = [:]
        var changedOrder: [DocumentPath] = []
        var writer: [DocumentPath: MutationID?] = [:]
        // Each document's data is encoded once: to check its size, to store it, to answer with it.
        var encoded: [DocumentPath: String] = [:]
        var acknowledgements: [WriteAcknowledgement] = []
        acknowledgements.reserveCapacity(mutations.count)
        for (position, mutation) in mutations.enumerated() {
            let before: Document?
            if let entry = committed[mutation.path] {
                before = entry
            } else {
                before = try transaction.document(at: mutation.path)
                committed[mutation.path] = .some(before)
            }
            let existing: Document?
            if let entry = working[mutation.path] {
                existing = entry
            } else {
                existing = before
            }
            let after: Document?
            let text: String?
            do throws(TandemError) {
                after = try mutation.applyValidated(to: existing, version: version, serverTime: time)
                text = after.map { JSONText.encode($0.data) }
                if let text { try limits.checkDocument(encoded: text, at: mutation.path) }
                if let authorizer, let refusal = authorizer.check(mutation.path, before: existing, after: after) {
                    return .failure(Refusal(error: refusal, position: position))
                }
            } catch {
                // The error tells of the document's state: only a caller who may read it as
                // committed hears it. Asked of what earlier mutations of the request left, a
                // failure would tell whether they applied, hence of the document before them.
                if let concealed = authorizer?.concealment(mutation.path, document: before) {
                    return .failure(Refusal(error: concealed, position: position))
                }
                let current = error.code == .failedPrecondition ? before : nil
                if let earlier = changedBy[mutation.path], error.code == .failedPrecondition || error.code == .notFound {
                    let reason = Self.metEarlierWrite(mutation, error: error, left: existing, by: numbers[earlier])
                    return .failure(Refusal(error: reason, position: position, current: current))
                }
                return .failure(Refusal(error: error, position: position, current: current))
            }
            encoded[mutation.path] = text
            if existing != nil || after != nil {
                if working[mutation.path] == nil { changedOrder.append(mutation.path) }
                working[mutation.path] = .some(after)
                changedBy[mutation.path] = position
            }
            writer[mutation.path] = .some(mutation.id)
            acknowledgements.append(WriteAcknowledgement(id: mutation.id, status: .applied, version: version, document: after, encodedData: text))
        }
        var changes: [RemoteChange] = []
        changes.reserveCapacity(changedOrder.count)
        for path in changedOrder {
            let document = working[path]!
            let id = writer[path] ?? nil
            try transaction.write(document, at: path, version: version, time: time.date, encodedData: encoded[path] ?? nil, writer: id)
            changes.append(RemoteChange(path: path, document: document, version: version, mutationID: id))
        }
        return .success(Applied(acknowledgements: acknowledgements, changes: changes))
    }
}

/// The requests of one `commit` call, checked, with what they were checked against and who sent
/// them: what a store's group commit queues, and decides with others in one transaction.
package struct CommitSubmission: Sendable {
    package var requests: [CommitPlanner.CheckedRequest]
    package var limits: ServerLimits
    package var clientID: String?
    package var authorizer: WriteAuthorizer?
}

extension CommitPlanner {
    /// A store's `commit`: each request checked first (off the store's writer, so it spends its
    /// time committing), the valid ones decided together by `decide`, and the answers given in
    /// the order of the requests. What `decide` throws fails every valid request with it
    /// (`unavailable` unless it is a ``TandemError``).
    package static func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?,
                               decide: (CommitSubmission) async throws -> [Result<CommitResult, TandemError>]) async -> [Result<CommitResult, TandemError>] {
        var checked: [Result<CheckedRequest, TandemError>] = []
        checked.reserveCapacity(requests.count)
        for mutations in requests {
            do throws(TandemError) {
                checked.append(.success(try check(mutations, limits: limits)))
            } catch {
                checked.append(.failure(error))
            }
        }
        let valid = checked.compactMap { try? $0.get() }
        guard !valid.isEmpty else { return checked.map { $0.map { _ in CommitResult(acknowledgements: [], batch: nil) } } }
        let decided: Result<[Result<CommitResult, TandemError>], TandemError>
        do {
            decided = .success(try await decide(CommitSubmission(requests: valid, limits: limits, clientID: clientID, authorizer: authorizer)))
        } catch {
            decided = .failure(error as? TandemError ?? TandemError(.unavailable, "The commit did not finish: \(error). Nothing was written; retry.", cause: error))
        }
        var next = 0
        return checked.map { entry in
            switch entry {
            case .failure(let error):
                return .failure(error)
            case .success:
                defer { next += 1 }
                return decided.flatMap { $0[next] }
            }
        }
    }

    /// Decides the submissions of one group commit in `transaction`, in order, each request that
    /// applies taking the next version after `start`. Returns each submission's answers and the
    /// last version taken. Throws what the transaction throws, which fails the whole group.
    package static func decide<Transaction: StoreTransaction>(_ submissions: [CommitSubmission], in transaction: inout Transaction,
                                                              time: ServerTime, after start: Version) throws -> (answers: [[Result<CommitResult, TandemError>]], last: Version) {
        var answers: [[Result<CommitResult, TandemError>]] = []
        answers.reserveCapacity(submissions.count)
        var version = start
        for submission in submissions {
            let planner = CommitPlanner(limits: submission.limits, time: time, authorizer: submission.authorizer)
            var results: [Result<CommitResult, TandemError>] = []
            results.reserveCapacity(submission.requests.count)
            for request in submission.requests {
                let result = try planner.decide(request, in: &transaction, version: version.next, committed: version, clientID: submission.clientID)
                if case .success(let answer) = result, answer.batch != nil { version = version.next }
                results.append(result)
            }
            answers.append(results)
        }
        return (answers, version)
    }
}
