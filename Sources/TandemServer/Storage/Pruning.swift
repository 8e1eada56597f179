import Foundation
import Logging

/// A store's housekeeping loop: prunes tombstones (and the records of decided mutations) older
/// than `retention` every `interval` of `clock`, until its task is cancelled. A failed pruning is
/// logged and tried again at the next interval.
package func pruneEvery(_ interval: Duration, on clock: any Clock<Duration>, retention: Duration, now: @Sendable () -> Date, logger: Logger,
                        prune: (_ olderThan: Date) async throws -> Void) async {
    while !Task.isCancelled {
        do {
            try await clock.sleep(for: interval)
        } catch {
            return
        }
        do {
            try await prune(now().addingTimeInterval(-retention.doubleSeconds))
        } catch {
            logger.error("tombstone pruning failed: \(error); it runs again in \(interval)")
        }
    }
}
