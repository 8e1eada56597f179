import Foundation
import ServiceLifecycle
import Synchronization
import TandemCore

/// A ``ServerStore`` that keeps everything in memory, with the real semantics: the same
/// ``CommitPlanner`` decides its commits, so exactly-once, refusals, versions, change feeds and
/// pruning behave as on ``SQLiteServerStore``, and the same conformance suite checks both. For
/// tests, previews and demos; its data is gone with it.
///
/// Its housekeeping runs in `run()` on the clock it is given, so a test advances a manual clock
/// instead of waiting for pruning.
///
/// ```swift
/// let clock = ManualClock()
/// let store = MemoryServerStore(clock: clock)
/// let server = SyncServer(store: store)
/// ```
public final class MemoryServerStore<C: Clock>: ServerStore where C.Duration == Duration {
    /// How a ``MemoryServerStore`` keeps its data.
    public struct Configuration: Sendable {
        /// How long tombstones and the records of decided mutations are kept. Default 30 days.
        public var tombstoneRetention: Duration = .seconds(30 * 24 * 3600)
        /// How often `run()` prunes, on the store's clock. Default hourly.
        public var pruneInterval: Duration = .seconds(3600)
        /// The wall clock for create/update times, `serverTimestamp` and retention.
        public var now: @Sendable () -> Date = { Date() }

        /// The defaults each property states: 30 days' retention, hourly pruning, the system's
        /// wall clock.
        public init() {}
    }

    /// One document's row: its state (nil for a tombstone) and what wrote it when.
    struct Row: Sendable {
        var path: DocumentPath
        var document: Document?
        var version: Version
        var updateTime: Date
        var writer: MutationID?
    }

    struct Storage: Sendable {
        var rows: [DocumentPath: Row] = [:]
        var byCollection: [CollectionPath: Set<DocumentPath>] = [:]
        var byGroup: [String: Set<DocumentPath>] = [:]
        var records: [String: [UInt64: MutationRecord]] = [:]
        var highest: [String: UInt64] = [:]
        var pruned: [String: UInt64] = [:]
        var owners: [String: String] = [:]
        var version = Version.zero
        var prunedThrough = Version.zero
    }

    /// The clock `run()` waits on between prunings.
    public let clock: C
    /// How the store keeps its data, as given at creation.
    public let configuration: Configuration
    private let storage = Mutex(Storage())
    private let observers = Mutex<[@Sendable (CommitNotice) -> Void]>([])
    /// Commits to fail on purpose, and how (``failNextCommits(_:with:)``).
    private let failures = Mutex<(left: Int, error: TandemError)>((0, TandemError(.unavailable, "")))

    /// An empty store whose housekeeping runs on `clock`.
    public init(clock: C, configuration: Configuration = Configuration()) {
        self.clock = clock
        self.configuration = configuration
    }

    // MARK: Service

    /// Prunes every `pruneInterval` of the store's clock until the service group shuts down.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await self.clock.sleep(for: self.configuration.pruneInterval)
                } catch {
                    return
                }
                self.prune(olderThan: self.configuration.now().addingTimeInterval(-self.configuration.tombstoneRetention.doubleSeconds))
            }
        }
    }

    public func observeCommits(_ observer: @escaping @Sendable (CommitNotice) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    // MARK: Writes

    public func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?) async -> [Result<CommitResult, TandemError>] {
        if let failure = failures.withLock({ failures -> TandemError? in
            guard failures.left > 0 else { return nil }
            failures.left -= 1
            return failures.error
        }) {
            // As a database that could not commit: every request of the commit, nothing written.
            return requests.map { _ in .failure(failure) }
        }
        return commitNow(requests, limits: limits, clientID: clientID, authorizer: authorizer)
    }

    /// Fault injection for tests: the next `count` commits fail whole with `error`, writing
    /// nothing, as a database that could not commit would (the server answers each request of
    /// them with it; a passing error holds back its writers' later writes, as the protocol says).
    public func failNextCommits(_ count: Int, with error: TandemError = TandemError(.unavailable, "The store could not commit (a failure injected on purpose); send the write again.")) {
        failures.withLock { $0 = (count, error) }
    }

    /// ``commit(_:limits:clientID:)`` without suspending: a memory store decides a commit in one
    /// locked step. For tests and previews that change the data as another client would, from
    /// synchronous code.
    public func commitNow(_ requests: [[Mutation]], limits: ServerLimits = ServerLimits(), clientID: String? = nil, authorizer: WriteAuthorizer? = nil) -> [Result<CommitResult, TandemError>] {
        let time = ServerTime(WireTimestamp.date(milliseconds: WireTimestamp.milliseconds(configuration.now())))
        let planner = CommitPlanner(limits: limits, time: time, authorizer: authorizer)
        let observers = self.observers.withLock { $0 }
        return storage.withLock { storage in
            var transaction = MemoryTransaction(storage: storage)
            storage = Storage()
            defer { storage = transaction.storage }
            var results: [Result<CommitResult, TandemError>] = []
            var batches: [CommittedBatch] = []
            let start = transaction.storage.version
            for mutations in requests {
                let checked: CommitPlanner.CheckedRequest
                do throws(TandemError) {
                    checked = try CommitPlanner.check(mutations, limits: limits)
                } catch {
                    results.append(.failure(error))
                    continue
                }
                let version = transaction.storage.version
                // A memory transaction never throws: nothing here can fail halfway.
                guard let result = try? planner.decide(checked, in: &transaction, version: version.next, committed: version, clientID: clientID) else {
                    results.append(.failure(TandemError(.internal, "The memory store failed to decide a write.")))
                    continue
                }
                results.append(result)
                if case .success(let answer) = result, let batch = answer.batch {
                    transaction.storage.version = batch.version
                    if !batch.changes.isEmpty { batches.append(batch) }
                }
            }
            // Told under the lock, so observers hear of commits in version order; an observer only
            // queues the notice.
            if transaction.storage.version != start {
                let notice = CommitNotice(batches: batches, visibleThrough: transaction.storage.version)
                for observer in observers { observer(notice) }
            }
            return results
        }
    }

    @discardableResult
    public func pruneTombstones(olderThan date: Date) async throws -> Int {
        prune(olderThan: date)
    }

    @discardableResult
    private func prune(olderThan date: Date) -> Int {
        storage.withLock { storage in
            var count = 0
            for (path, row) in storage.rows where row.document == nil && row.updateTime < date {
                storage.rows[path] = nil
                storage.byCollection[path.parent]?.remove(path)
                storage.byGroup[path.collectionGroup]?.remove(path)
                storage.prunedThrough = max(storage.prunedThrough, row.version)
                count += 1
            }
            for (client, records) in storage.records {
                let newest = storage.highest[client]
                var kept = records
                for (sequence, record) in records where sequence != newest && record.time < date {
                    kept[sequence] = nil
                    storage.pruned[client] = max(storage.pruned[client] ?? 0, sequence)
                }
                storage.records[client] = kept
            }
            return count
        }
    }

    // MARK: Reads

    public func currentVersion() async throws -> Version {
        storage.withLock { $0.version }
    }

    /// The newest version, read without suspending.
    public var version: Version { storage.withLock { $0.version } }

    /// The live documents by path, read without suspending: what a test inspects.
    public var documents: [DocumentPath: Document] {
        storage.withLock { storage in
            var documents: [DocumentPath: Document] = [:]
            for (path, row) in storage.rows {
                if let document = row.document { documents[path] = document }
            }
            return documents
        }
    }

    public func read(_ target: ListenTarget) async throws -> StoreSnapshot {
        let (documents, version) = storage.withLock { storage -> ([Document], Version) in
            (Self.scope(target, in: storage).compactMap { storage.rows[$0]?.document }, storage.version)
        }
        switch target {
        case .document:
            return StoreSnapshot(documents: documents, version: version)
        case .collection(_, let query), .collectionGroup(_, let query):
            return StoreSnapshot(documents: try query.evaluate(documents), version: version)
        }
    }

    public func collectionIDs(under parent: DocumentPath?) async throws -> [String] {
        let prefix = CollectionListing.prefix(of: parent)
        return storage.withLock { storage in
            CollectionListing.sorted(storage.rows.compactMap { path, row in
                row.document == nil ? nil : CollectionListing.directChild(path.parent.description, prefix: prefix)
            })
        }
    }

    public func collectionGroups() async throws -> [String] {
        storage.withLock { storage in
            CollectionListing.sorted(storage.rows.compactMap { path, row in row.document == nil ? nil : path.collectionGroup })
        }
    }

    public func changes(since version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try changes(since: version, in: target, limit: limit, fromStart: version == .zero)
    }

    public func changes(continuingFromStartAfter version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try changes(since: version, in: target, limit: limit, fromStart: true)
    }

    /// A page of the feed; `fromStart`: of a read that began at version 0, served whatever was pruned.
    private func changes(since version: Version, in target: ListenTarget?, limit: Int, fromStart: Bool) throws -> ChangePage {
        let limit = max(1, limit)
        let (found, newest) = try storage.withLock { storage throws(TandemError) -> ([Row], Version) in
            if version > storage.version {
                throw TandemError(.outOfRange, "Version \(version) is beyond this server's newest, \(storage.version): the server's data is not the history this version came from (restored from a backup, or replaced). Reload a full snapshot.")
            }
            // A read from the beginning needs no tombstones (its reader holds only what its pages
            // gave it): it is served whatever was pruned.
            if !fromStart, version < storage.prunedThrough {
                throw TandemError(.outOfRange, "Changes since version \(version) are no longer kept (tombstones through \(storage.prunedThrough) were pruned); reload a full snapshot, or fetch again from version 0.")
            }
            let paths = target.map { Self.scope($0, in: storage) } ?? Array(storage.rows.keys)
            return (paths.compactMap { storage.rows[$0] }.filter { $0.version > version }, storage.version)
        }
        var rows = found.sorted { ($0.version, $0.path) < ($1.version, $1.path) }
        var current = newest
        var hasMore = false
        if rows.count > limit {
            // Finish the last commit whole; what follows it comes in the next page.
            let through = rows[limit - 1].version
            let end = rows.firstIndex { $0.version > through } ?? rows.count
            hasMore = end < rows.count
            rows = Array(rows[..<end])
            if hasMore { current = through }
        }
        let compiled = try target?.query.map { try CompiledQuery($0) }
        let changes = rows.map { row -> RemoteChange in
            if let document = row.document, compiled.map({ $0.matchesFiltersAndCursors(document.data) }) ?? true {
                return RemoteChange(path: row.path, document: document, version: row.version, mutationID: row.writer)
            }
            return RemoteChange(path: row.path, document: nil, version: row.version, mutationID: row.writer)
        }
        return ChangePage(changes: changes, version: current, hasMore: hasMore)
    }

    /// The paths in a target's scope, live or not, in path order.
    private static func scope(_ target: ListenTarget, in storage: Storage) -> [DocumentPath] {
        switch target {
        case .document(let path): return storage.rows[path] == nil ? [] : [path]
        case .collection(let path, _): return (storage.byCollection[path] ?? []).sorted()
        case .collectionGroup(let group, _): return (storage.byGroup[group] ?? []).sorted()
        }
    }
}

extension MemoryServerStore where C == ContinuousClock {
    /// A memory store whose housekeeping runs on the continuous clock.
    public convenience init(configuration: Configuration = Configuration()) {
        self.init(clock: ContinuousClock(), configuration: configuration)
    }
}

/// ``StoreTransaction`` over a memory store's storage, applied in place: nothing in it can fail.
struct MemoryTransaction<C: Clock>: StoreTransaction where C.Duration == Duration {
    var storage: MemoryServerStore<C>.Storage

    mutating func document(at path: DocumentPath) throws -> Document? {
        storage.rows[path]?.document
    }

    mutating func highestRecordedSequence(of clientID: String) throws -> UInt64? {
        storage.highest[clientID]
    }

    mutating func record(of id: MutationID) throws -> MutationRecord? {
        storage.records[id.clientID]?[id.sequence]
    }

    mutating func prunedSequence(of clientID: String) throws -> UInt64? {
        storage.pruned[clientID]
    }

    mutating func owner(of clientID: String) throws -> String? {
        storage.owners[clientID]
    }

    mutating func claim(_ clientID: String, for owner: String) throws {
        storage.owners[clientID] = owner
    }

    mutating func write(_ document: Document?, at path: DocumentPath, version: Version, time: Date, encodedData: String?, writer: MutationID?) throws {
        if storage.rows[path] == nil {
            storage.byCollection[path.parent, default: []].insert(path)
            storage.byGroup[path.collectionGroup, default: []].insert(path)
        }
        storage.rows[path] = MemoryServerStore<C>.Row(path: path, document: document, version: version, updateTime: time, writer: writer)
    }

    mutating func record(_ record: MutationRecord, for id: MutationID) throws {
        storage.records[id.clientID, default: [:]][id.sequence] = record
        storage.highest[id.clientID] = max(storage.highest[id.clientID] ?? 0, id.sequence)
    }
}
