import TandemCore

/// The order rules of one connection's writes, as a pure state machine: what to do with each write
/// request when it arrives and when its turn to commit comes.
///
/// A client may send many writes without waiting for their answers, and the server applies each
/// writer's writes in the order they were sent. When one is refused for a passing reason
/// (over the connection's rate, `resource-exhausted` with `retryAfter`; over its queue or the
/// database could not commit, `unavailable`), the
/// writes its writer sent after it must not apply ahead of it: each later one of that writer is
/// refused with `aborted` until the client sends the refused one again (a request whose sequences
/// of that writer span the refused one lifts the block). Other writers on the same connection go
/// on. A request refused whole blocks every writer with a write in it. Writes without mutation ids
/// carry no order and are never blocked.
///
/// Every refused write of a writer is remembered until it is sent again or answered for good, not
/// only the lowest: when the lowest is cleared, a later one refused meanwhile still holds back the
/// writes after it.
///
/// A block must never wait for a write the client already has its answer to, or it would wait for
/// good: a client that sent a write again before the first answer came (as it does after an earlier
/// one is refused) may see the second send refused, and has no reason to send it a third time. So
/// a write answered for good (applied, replayed or refused for good) clears a block at it, and a
/// refusal of a write at or below its writer's highest one answered for good blocks nothing.
struct WriteSequencer: Sendable {
    enum Decision: Sendable, Equatable {
        /// Queue it (on arrival) or commit it (at its turn).
        case proceed
        /// Answer it with this error; nothing of it is written.
        case refuse(TandemError)
    }

    let maximumPending: Int
    let writesPerSecond: Int
    private var limiter: RateLimiter
    /// Requests queued and not answered yet.
    private(set) var pending = 0
    /// For each blocked writer, the first sequence of each of its requests refused for a passing
    /// reason and neither sent again nor answered for good since, ascending. Bounded per writer: past
    /// ``maximumBlocksPerWriter`` the highest are forgotten (the lowest hold everything after them).
    private var blocked: [String: [UInt64]] = [:]
    static let maximumBlocksPerWriter = 1_024
    /// For each writer, the highest sequence answered for good on this connection. Bounded: a client
    /// that writes under more writer ids than this loses only the protection for the ones forgotten.
    private var settled: [String: UInt64] = [:]
    static let maximumSettledWriters = 256

    init(limits: ServerLimits) {
        maximumPending = limits.maximumPendingWritesPerConnection
        writesPerSecond = limits.maximumWritesPerSecond
        limiter = RateLimiter(perSecond: limits.maximumWritesPerSecond)
    }

    /// The write a writer's later writes wait for, if it is blocked.
    func blockedFrom(writer: String) -> MutationID? {
        blocked[writer]?.first.map { MutationID(clientID: writer, sequence: $0) }
    }

    /// Whether any writer is blocked.
    var isBlocked: Bool { !blocked.isEmpty }

    /// A write request arrives at `now` (a point on the server's clock).
    mutating func arrive(_ mutations: [Mutation], at now: Duration) -> Decision {
        let ranges = Self.sequenceRanges(of: mutations)
        let firsts = ranges.mapValues(\.lowerBound)
        if let refusal = blockingRefusal(firsts) {
            block(firsts)
            return .refuse(refusal)
        }
        // The refused writes this request sends again are clear.
        clear(ranges)
        if pending >= maximumPending {
            block(firsts)
            return .refuse(TandemError(.unavailable, "This connection has \(maximumPending) writes waiting to commit; nothing was written. Wait for their answers, then send this write and every one after it again, in order."))
        }
        if !limiter.admit(max(1, mutations.count), at: now) {
            block(firsts)
            let wait = limiter.wait(for: max(1, mutations.count))
            return .refuse(TandemError(.resourceExhausted, "This connection sent more than \(writesPerSecond) writes a second; nothing was written. Wait \(wait.wholeMilliseconds) ms (retryAfter), then send this write and every one after it again, in order.",
                                       retryAfter: wait))
        }
        pending += 1
        return .proceed
    }

    /// A request that ``arrive(_:at:)`` admitted is refused after all, for a passing reason (its
    /// user's rate): it is not queued, and its writers' later writes wait for it.
    mutating func withdraw(_ mutations: [Mutation]) {
        pending = max(0, pending - 1)
        block(Self.lowestIDs(of: mutations))
    }

    /// A queued request's turn to commit comes: refused if a write its writer sent before it was
    /// refused since it was queued.
    mutating func turn(_ mutations: [Mutation]) -> Decision {
        let firsts = Self.lowestIDs(of: mutations)
        guard let refusal = blockingRefusal(firsts) else { return .proceed }
        block(firsts)
        return .refuse(refusal)
    }

    /// A queued request could not be committed for a passing reason: its writers' later writes wait for it.
    mutating func failed(_ mutations: [Mutation]) {
        block(Self.lowestIDs(of: mutations))
    }

    /// A queued request was answered: for good (applied, replayed or refused for good), or not
    /// (refused for a passing reason, to be sent again).
    mutating func answered(_ mutations: [Mutation], forGood: Bool) {
        pending = max(0, pending - 1)
        guard forGood else { return }
        let ranges = Self.sequenceRanges(of: mutations)
        clear(ranges)
        for (writer, range) in ranges {
            if settled[writer] == nil, settled.count >= Self.maximumSettledWriters { settled.removeAll() }
            settled[writer] = max(range.upperBound, settled[writer] ?? 0)
        }
    }

    /// The refusal for a request one of whose writers is blocked before it, if any.
    private func blockingRefusal(_ firsts: [String: UInt64]) -> TandemError? {
        for (writer, first) in firsts.sorted(by: { $0.key < $1.key }) {
            if let blocker = blocked[writer]?.first, first > blocker {
                return Self.abort(MutationID(clientID: writer, sequence: first), blockedBy: MutationID(clientID: writer, sequence: blocker))
            }
        }
        return nil
    }

    private mutating func block(_ firsts: [String: UInt64]) {
        for (writer, first) in firsts {
            // Answered already: the client has no reason to send it again, and later writes need not wait.
            if let highest = settled[writer], first <= highest { continue }
            var marks = blocked[writer] ?? []
            let place = marks.firstIndex { $0 >= first } ?? marks.endIndex
            guard place == marks.endIndex || marks[place] != first else { continue }
            marks.insert(first, at: place)
            if marks.count > Self.maximumBlocksPerWriter { marks.removeLast() }
            blocked[writer] = marks
        }
    }

    /// Forgets the refused writes inside these sequences: sent again, or answered for good.
    private mutating func clear(_ ranges: [String: ClosedRange<UInt64>]) {
        for (writer, range) in ranges {
            guard var marks = blocked[writer] else { continue }
            marks.removeAll { range.contains($0) }
            blocked[writer] = marks.isEmpty ? nil : marks
        }
    }

    private static func abort(_ id: MutationID, blockedBy blocker: MutationID) -> TandemError {
        TandemError(.aborted, "Write \(id) was not applied because \(blocker), sent before it, was not applied; a writer's writes apply in the order they are sent. Send \(blocker) and the writes after it again, in order.")
    }

    /// The lowest sequence of each writer with a write in `mutations`.
    static func lowestIDs(of mutations: [Mutation]) -> [String: UInt64] {
        sequenceRanges(of: mutations).mapValues(\.lowerBound)
    }

    /// The lowest through the highest sequence of each writer with a write in `mutations`.
    static func sequenceRanges(of mutations: [Mutation]) -> [String: ClosedRange<UInt64>] {
        var ranges: [String: ClosedRange<UInt64>] = [:]
        for mutation in mutations {
            guard let id = mutation.id else { continue }
            if let range = ranges[id.clientID] {
                ranges[id.clientID] = min(id.sequence, range.lowerBound)...max(id.sequence, range.upperBound)
            } else {
                ranges[id.clientID] = id.sequence...id.sequence
            }
        }
        return ranges
    }
}
