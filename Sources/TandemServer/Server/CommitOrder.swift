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
