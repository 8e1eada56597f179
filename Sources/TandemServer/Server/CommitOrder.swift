import TandemCore

/// Puts committed batches in version order for the fan-out, whatever order a store reports them in.
///
/// A store reports batches as they commit and raises the watermark once every commit below it is
/// visible (``CommitNotice``). Batches above the watermark wait here; when the watermark passes
/// them they come out in version order, so the fan-out, which skips what a listener's snapshot
/// already holds by version, never skips a commit that was merely late. Pure: no I/O, no clock.
struct CommitOrder: Sendable {
    private var waiting: [CommittedBatch] = []
    /// Every commit at or below this version has been released.
    private(set) var watermark: Version = .zero

    init(watermark: Version = .zero) {
        self.watermark = watermark
    }

    /// What a notice releases, in version order; late batches (at or below the watermark already
    /// released, which the store contract forbids) come out at once, and are counted in `late`.
    mutating func receive(_ notice: CommitNotice) -> (ready: [CommittedBatch], late: Int) {
        var late: [CommittedBatch] = []
        for batch in notice.batches {
            if batch.version <= watermark {
                late.append(batch)
            } else {
                waiting.append(batch)
            }
        }
        guard notice.visibleThrough > watermark else { return (late, late.count) }
        watermark = notice.visibleThrough
        waiting.sort { $0.version < $1.version }
        let split = waiting.firstIndex { $0.version > watermark } ?? waiting.count
        let ready = Array(waiting[..<split])
        waiting.removeFirst(split)
        return (late + ready, late.count)
    }

    /// How many batches wait for the watermark.
    var waitingCount: Int { waiting.count }
}

/// Decides when the fan-out delivers the batches ``CommitOrder`` releases. Pure: the time comes in
/// with each call, and the store's answer is asked only when there is something to hold.
///
/// - A quiet server delivers at once.
/// - While the store has commits under way (``ServerStore/commitsUnderWay()``, which promises
///   another notice), batches wait for that notice and go out together, for at most `limit`
///   notices in a row.
/// - Under sustained write load (``FanOutPacing``: at least `busyCommits` commits within one
///   `interval`), the hub delivers at most once per `interval`: each connection gets one larger
///   frame instead of one per group commit, which is what a thousand listeners cost the writers
///   (every frame is a socket write and a reader's wake-up), at the price of up to `interval` of
///   latency while the load lasts.
struct DeliveryHold: Sendable {
    enum Decision: Equatable {
        /// Deliver these now.
        case deliver([CommittedBatch])
        /// Nothing to deliver until the store's next notice.
        case wait
        /// Paced: ask again at this time on the clock (notices meanwhile join what is held).
        case waitUntil(Duration)
    }

    let limit: Int
    let pacing: FanOutPacing?
    private var held: [CommittedBatch] = []
    private var holds = 0
    private var lastDelivery: Duration?
    /// The delivery before the last, which ``reachedNoListener()`` takes back.
    private var deliveryBefore: Duration?
    /// Commits released within the last pacing interval, and when.
    private var recent: [(at: Duration, count: Int)] = []
    private var recentStart = 0
    private var recentCount = 0

    init(limit: Int, pacing: FanOutPacing? = nil) {
        self.limit = limit
        self.pacing = pacing
    }

    /// Takes the batches one wake-up released at `now` (in version order, after those held) and
    /// decides what to do with everything held.
    mutating func receive(_ released: [CommittedBatch], now: Duration, commitsUnderWay: () -> Bool) -> Decision {
        held += released
        if let pacing { count(released.count, at: now, within: pacing.interval) }
        if held.isEmpty { return .wait }
        if let pacing, recentCount >= pacing.busyCommits, let lastDelivery {
            let due = lastDelivery + pacing.interval
            return now < due ? .waitUntil(due) : deliver(at: now)
        }
        if holds < limit, commitsUnderWay() {
            holds += 1
            return .wait
        }
        return deliver(at: now)
    }

    private mutating func deliver(at now: Duration) -> Decision {
        holds = 0
        deliveryBefore = lastDelivery
        lastDelivery = now
        defer { held = [] }
        return .deliver(held)
    }

    private mutating func count(_ commits: Int, at now: Duration, within interval: Duration) {
        if commits > 0 {
            recent.append((now, commits))
            recentCount += commits
        }
        while recentStart < recent.count, recent[recentStart].at <= now - interval {
            recentCount -= recent[recentStart].count
            recentStart += 1
        }
        if recentStart >= 64, recentStart * 2 >= recent.count {
            recent.removeFirst(recentStart)
            recentStart = 0
        }
    }

    /// Says the last delivery reached no listener (every change outside each listener's scope):
    /// it sent no frame, so the pacing does not count it, and the next delivery is due as if it
    /// had not been made. Commits no one listens to never delay those someone does.
    mutating func reachedNoListener() {
        lastDelivery = deliveryBefore
    }

    /// Batches waiting to be delivered.
    var heldCount: Int { held.count }
}
