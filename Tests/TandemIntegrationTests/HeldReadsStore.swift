import Foundation
import TandemCore
import TandemServer
import TandemTesting

/// A memory store whose reads (``read(_:)`` and ``changes(since:in:limit:)``) wait at a gate until
/// the test opens it: reads held under way for as long as a test needs, with no clock and no
/// sleep. Everything else, and every read once the gate is open, is the memory store's own.
///
/// ```swift
/// let store = HeldReadsStore()
/// // … reads sent …
/// await store.gate.wait { $0.arrived == 2 }   // both are under way, held
/// store.gate.withLock { $0.open = true }      // now they read
/// ```
final class HeldReadsStore: ServerStore {
    struct Gate: Sendable {
        /// Reads that reached the store, held or let through.
        var arrived = 0
        /// Whether reads go through.
        var open = false
    }

    let base = MemoryServerStore(clock: ManualClock())
    let gate = Locked(Gate())

    /// Counts a read, waits for the gate to open, then reads.
    private func held<Answer>(_ read: () async throws -> Answer) async throws -> Answer {
        gate.withLock { $0.arrived += 1 }
        await gate.wait(until: { $0.open })
        return try await read()
    }

    func run() async throws {
        try await base.run()
    }

    func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?) async -> [Result<CommitResult, TandemError>] {
        await base.commit(requests, limits: limits, clientID: clientID, authorizer: authorizer)
    }

    func read(_ target: ListenTarget) async throws -> StoreSnapshot {
        try await held { try await base.read(target) }
    }

    func encodedSnapshot(_ target: ListenTarget, groupSize: Int, frames: @escaping @Sendable (EncodedSnapshotFrame) -> Bool) async throws -> Version? {
        try await base.encodedSnapshot(target, groupSize: groupSize, frames: frames)
    }

    func changes(since version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try await held { try await base.changes(since: version, in: target, limit: limit) }
    }

    func currentVersion() async throws -> Version {
        try await base.currentVersion()
    }

    func collectionIDs(under parent: DocumentPath?) async throws -> [String] {
        try await base.collectionIDs(under: parent)
    }

    func collectionGroups() async throws -> [String] {
        try await base.collectionGroups()
    }

    func observeCommits(_ observer: @escaping @Sendable (CommitNotice) -> Void) {
        base.observeCommits(observer)
    }

    func commitsUnderWay() -> Bool {
        base.commitsUnderWay()
    }

    func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void) {
        base.observeGroupCommits(observer)
    }

    func storeSize() async -> Int? {
        await base.storeSize()
    }

    func pruneTombstones(olderThan date: Date) async throws -> Int {
        try await base.pruneTombstones(olderThan: date)
    }
}
