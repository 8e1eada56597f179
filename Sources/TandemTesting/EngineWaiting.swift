import Tandem

// Awaiting an engine's state in tests: each change the engine shows wakes the check, nothing
// polls. A condition that never holds waits until the task is cancelled (a test's time limit),
// or until the timeout given, then answers false.

/// Awaiting a collection engine's state in tests.
extension CollectionSyncEngine {
    /// Returns true once `condition` holds: checked now and after each change of the engine's
    /// state (documents, pending and rejected writes, metadata).
    ///
    /// ```swift
    /// try remote.simulateDelete(id: "desk")
    /// #expect(await engine.waitUntil { engine.getDocument(id: "desk") == nil })
    /// ```
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a collection-group engine's state in tests.
extension CollectionGroupSyncEngine {
    /// Returns true once `condition` holds: checked now and after each change of the engine's state.
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a document engine's state in tests.
extension DocumentSyncEngine {
    /// Returns true once `condition` holds: checked now and after each change of the engine's state.
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(core.changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a synced collection's state in tests.
extension SyncedCollection {
    /// Returns true once `condition` holds: checked now and after each change of the handle's
    /// state (its value, pending writes, errors).
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a synced document's state in tests.
extension SyncedDocument {
    /// Returns true once `condition` holds: checked now and after each change of the handle's state.
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a synced query's state in tests.
extension SyncedQuery {
    /// Returns true once `condition` holds: checked now and after each change of the handle's state.
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), until: timeout, on: clock, condition)
    }
}

/// Awaiting a change-sync engine's events and status in tests.
extension ChangeSyncEngine {
    /// Returns true once `condition` holds: checked now and after each of the engine's events and
    /// changes of status.
    @discardableResult
    public func waitUntil(_ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), condition)
    }

    /// As ``waitUntil(_:)``, giving up after `timeout` on `clock`: false when the condition still
    /// does not hold then. For tests without a time limit of their own.
    @discardableResult
    public func waitUntil(timeout: Duration, clock: any Clock<Duration> = ContinuousClock(), _ condition: () -> Bool) async -> Bool {
        await waitForChanges(changeSignals(), until: timeout, on: clock, condition)
    }
}

private func waitForChanges<Changes: AsyncSequence>(_ changes: Changes, _ condition: () -> Bool) async -> Bool {
    if condition() { return true }
    do {
        for try await _ in changes where condition() { return true }
    } catch {
        // The engine's changes ended with an error: answer with the state as it is.
    }
    return condition()
}

/// As above, until `timeout` passes on `clock`: each change, and the deadline, wake the check.
private func waitForChanges<Changes: AsyncSequence & Sendable>(_ changes: Changes, until timeout: Duration, on clock: any Clock<Duration>,
                                                             _ condition: () -> Bool) async -> Bool {
    if condition() { return true }
    // One stream of wake-ups: true for a change, false for the deadline.
    let (wakes, wake) = AsyncStream<Bool>.makeStream()
    let forward = Task {
        do {
            for try await _ in changes { wake.yield(true) }
        } catch {
            // The engine's changes ended with an error: the deadline still comes.
        }
    }
    let deadline = Task {
        try? await clock.sleep(for: timeout)
        wake.yield(false)
    }
    defer {
        forward.cancel()
        deadline.cancel()
        wake.finish()
    }
    for await changed in wakes {
        if condition() { return true }
        if !changed { return false }
    }
    return condition()
}
