import TandemCore

/// The order rules of one connection's writes, as a pure state machine: what to do with each write
/// request when it arrives and when its turn to commit comes.
///
/// A client may send many writes without waiting for their answers, and the server applies them in
/// the order sent. When one is refused for a passing reason (`unavailable`: over the connection's
/// rate or queue, or the database could not commit), the writes the client sent after it must not
/// apply ahead of it: each later one is refused with `aborted` until the client sends the refused
/// one again (any write whose lowest sequence is at or below the refused one's lifts the block).
/// Writes without mutation ids carry no order and are never blocked.
struct WriteSequencer: Sendable {
    enum Decision: Sendable, Equatable {
        /// Queue it (on arrival) or commit it (at its turn).
        case proceed
        /// Answer it with this error; nothing of it is written.
        case refuse(TandemError)
    }

    let maximumPending: Int
    let writesPerSecond: Int
    private var limiter: WriteRateLimiter
    /// Requests queued and not answered yet.
    private(set) var pending = 0
    /// The lowest mutation id refused for a passing reason and not sent again since.
    private(set) var blockedFrom: MutationID?

    init(limits: ServerLimits) {
        maximumPending = limits.maximumPendingWritesPerConnection
        writesPerSecond = limits.maximumWritesPerSecond
        limiter = WriteRateLimiter(writesPerSecond: limits.maximumWritesPerSecond)
    }

    /// A write request arrives at `now` (a point on the server's clock).
    mutating func arrive(_ mutations: [Mutation], at now: Duration) -> Decision {
        let first = Self.lowestID(of: mutations)
        if let refusal = blocked(first) { return .refuse(refusal) }
        if pending >= maximumPending {
            block(first)
            return .refuse(TandemError(.unavailable, "This connection has \(maximumPending) writes waiting to commit; nothing was written. Wait for their answers, then send this write and every one after it again, in order."))
        }
        if !limiter.admit(max(1, mutations.count), at: now) {
            block(first)
            let wait = limiter.wait(for: max(1, mutations.count))
            return .refuse(TandemError(.unavailable, "This connection sent more than \(writesPerSecond) writes a second; nothing was written. Wait \(wait.doubleSeconds) s, then send this write and every one after it again, in order."))
        }
        pending += 1
        return .proceed
    }

    /// A queued request's turn to commit comes: refused if a write sent before it was refused since
    /// it was queued.
    mutating func turn(_ mutations: [Mutation]) -> Decision {
        guard let blockedFrom, let first = Self.lowestID(of: mutations), first.sequence > blockedFrom.sequence else { return .proceed }
        return .refuse(Self.abort(first, blockedBy: blockedFrom))
    }

    /// A queued request could not be committed for a passing reason: later ones wait for it.
    mutating func failed(_ mutations: [Mutation]) {
        block(Self.lowestID(of: mutations))
    }

    /// A queued request was answered.
    mutating func answered() {
        pending = max(0, pending - 1)
    }

    private mutating func blocked(_ first: MutationID?) -> TandemError? {
        guard let blockedFrom, let first else { return nil }
        if first.sequence <= blockedFrom.sequence {
            // The refused write, sent again: the way is clear.
            self.blockedFrom = nil
            return nil
        }
        return Self.abort(first, blockedBy: blockedFrom)
    }

    private mutating func block(_ first: MutationID?) {
        guard let first else { return }
        if blockedFrom.map({ first.sequence < $0.sequence }) ?? true { blockedFrom = first }
    }

    private static func abort(_ id: MutationID, blockedBy blocker: MutationID) -> TandemError {
        TandemError(.aborted, "Write \(id) was not applied because \(blocker), sent before it, was not applied; writes apply in the order they are sent. Send \(blocker) and the writes after it again, in order.")
    }

    static func lowestID(of mutations: [Mutation]) -> MutationID? {
        var lowest: MutationID?
        for mutation in mutations {
            if let id = mutation.id, lowest.map({ id.sequence < $0.sequence }) ?? true { lowest = id }
        }
        return lowest
    }
}
