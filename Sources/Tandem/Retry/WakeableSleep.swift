/// Sleeps on a clock until a delay passes or someone wakes the sleeper, whichever comes first; a
/// cancelled task stops sleeping at once. The sleeper's owner keeps the continuation in its own
/// locked state: `park` stores it (or answers true to go on at once, when a wake already came), and
/// `unpark` takes it back out on cancellation.
enum WakeableSleep {
    static func sleep(
        on clock: any Clock<Duration>, for delay: Duration?,
        park: @escaping @Sendable (CheckedContinuation<Void, Never>) -> Bool,
        unpark: @escaping @Sendable () -> CheckedContinuation<Void, Never>?
    ) async {
        await withTaskGroup(of: Void.self) { group in
            if let delay {
                group.addTask { try? await clock.sleep(for: delay) }
            }
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        if Task.isCancelled || park(continuation) {
                            continuation.resume()
                        } else if Task.isCancelled {
                            // Cancelled between the check and the park: the cancellation handler
                            // found nothing to unpark, so take it back here (at most one of the
                            // two gets it).
                            unpark()?.resume()
                        }
                    }
                } onCancel: {
                    unpark()?.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }
}
