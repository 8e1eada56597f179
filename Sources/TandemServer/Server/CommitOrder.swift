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

/// Decides when the fan-out delivers the batches ``CommitOrder`` releases. With the store idle,
/// at once. While the store has commits under way (``ServerStore/commitsUnderWay()``, which
/// promises another notice), they wait for that notice and go out together, for at most `limit`
/// notices in a row: under write load each connection gets one larger frame instead of one per
/// group commit, and a quiet server delivers with no delay. Pure: the store's answer is asked only
/// when there is something to hold.
struct DeliveryHold: Sendable {
    let limit: Int
    private var held: [CommittedBatch] = []
    private var holds = 0

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes the batches one wake-up released (in version order, after those held) and returns
    /// what to deliver now; empty while holding.
    mutating func receive(_ released: [CommittedBatch], commitsUnderWay: () -> Bool) -> [CommittedBatch] {
        held += released
        if held.isEmpty { return [] }
        if holds < limit, commitsUnderWay() {
            holds += 1
            return []
        }
        holds = 0
        defer { held = [] }
        return held
    }

    /// Batches waiting for the store's next notice.
    var heldCount: Int { held.count }
}
