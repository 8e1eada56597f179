import Foundation
import GRDB
import ServiceLifecycle
import Synchronization
import TandemCore

/// The embedded default ``ServerStore``: one SQLite database file in WAL mode, through GRDB.
///
/// Each document is one row: its path, collection path, collection-group name, version, create and
/// update times, and its body as JSON (NULL for a tombstone). One version sequence numbers the
/// commits. The decision about each client mutation (its answer, or its refusal, with the digest of
/// its content) is written in the same transaction as the write, by ``CommitPlanner``; the newest
/// one of each client is its high-water mark, which pruning always keeps. Concurrent commits share
/// one transaction (group commit); each writer is answered only after it is durable.
///
/// ```swift
/// let store = try SQLiteServerStore(path: "./.tandem/tandem.sqlite")
/// let result = try await store.commit([.set(try DocumentPath("users/ada"), ["name": "Ada"])])
/// ```
public final class SQLiteServerStore: ServerStore {
    let pool: DatabasePool
    let configuration: SQLiteServerStoreConfiguration
    private let observers = CommitObservers()
    /// Told each group commit's number of requests.
    let groupSizes = Observers<Int>()
    /// The last committed version; touched only by the one drain that commits at a time.
    let lastVersion: Mutex<Version>
    /// Transactions committed and requests they held, for the benchmark's figures.
    let transactions = Atomic<Int>(0)
    let requestsCommitted = Atomic<Int>(0)

    /// The average number of write requests that shared one transaction so far.
    package var requestsPerTransaction: Double {
        Double(requestsCommitted.load(ordering: .relaxed)) / Double(max(1, transactions.load(ordering: .relaxed)))
    }
    private let queue = GroupCommitQueue<CommitSubmission, [Result<CommitResult, TandemError>]>()
    /// Each client's newest applied sequence, as committed, for the clients seen lately: a write
    /// checks it without a query. Only the drain reads and writes it.
    let highWaterMarks = Mutex<[String: Int64]>([:])
    /// The owner of each writer id seen lately, as committed (see `StoreTransaction.owner(of:)`).
    let owners = Mutex<[String: String]>([:])

    /// Opens (creating if needed) the database at `path`.
    public init(path: String, configuration: SQLiteServerStoreConfiguration = SQLiteServerStoreConfiguration()) throws {
        var config = Configuration()
        config.label = "tandem-server"
        do {
            pool = try DatabasePool(path: path, configuration: config)
            // Set on the writer after the pool opens: opening a pool sets WAL mode with
            // `synchronous = NORMAL`, which would override a setting made in `prepareDatabase`.
            // FULL syncs the WAL on every commit, so an acknowledged write survives a power loss.
            let synchronous = configuration.durableCommits ? "FULL" : "NORMAL"
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            }
            try Self.migrator.migrate(pool)
            // Commits do not rewrite a counter (one page less to sync per commit): the last version
            // is the newest one any row holds, or the one recorded when rows were pruned.
            lastVersion = Mutex(try pool.read(Self.newestVersion))
        } catch {
            throw TandemError(.unavailable, "Cannot open the server database at \(path): \(error). Check that the directory exists and is writable.", cause: error)
        }
        self.configuration = configuration
    }

    /// Opens the database `tandem.sqlite` in a directory, creating the directory if needed.
    public convenience init(directory: URL, configuration: SQLiteServerStoreConfiguration = SQLiteServerStoreConfiguration()) throws {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw TandemError(.unavailable, "Cannot create the data directory \(directory.path): \(describeFileError(error)). Give a directory this user can create and write (--data-dir).", cause: error)
        }
        try self.init(path: directory.appendingPathComponent("tandem.sqlite").path, configuration: configuration)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE documents (
                    path TEXT PRIMARY KEY NOT NULL,
                    collection TEXT NOT NULL,
                    collection_group TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    create_time INTEGER NOT NULL,
                    update_time INTEGER NOT NULL,
                    data TEXT,
                    mutation_client TEXT,
                    mutation_sequence INTEGER
                ) WITHOUT ROWID;
                CREATE INDEX documents_by_collection ON documents(collection, version);
                CREATE INDEX documents_by_group ON documents(collection_group, version);
                CREATE INDEX documents_by_version ON documents(version);
                CREATE TABLE mutation_results (
                    client_id TEXT NOT NULL,
                    sequence INTEGER NOT NULL,
                    version INTEGER NOT NULL,
                    commit_time INTEGER NOT NULL,
                    document TEXT,
                    PRIMARY KEY (client_id, sequence)
                ) WITHOUT ROWID;
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
                INSERT INTO meta (key, value) VALUES ('version', 0), ('pruned_through', 0);
                """)
        }
        migrator.registerMigration("v2: answers may name their document") { db in
            // NULL in rows written before: their document column says it all.
            try db.execute(sql: "ALTER TABLE mutation_results ADD COLUMN path TEXT")
        }
        migrator.registerMigration("v3: refusals, digests and pruned sequences are kept") { db in
            // NULL status: an applied mutation, as every row written before; NULL digest: taken on trust.
            try db.execute(sql: """
                ALTER TABLE mutation_results ADD COLUMN status TEXT;
                ALTER TABLE mutation_results ADD COLUMN error_code TEXT;
                ALTER TABLE mutation_results ADD COLUMN error_message TEXT;
                ALTER TABLE mutation_results ADD COLUMN digest INTEGER;
                CREATE TABLE pruned_clients (client_id TEXT PRIMARY KEY NOT NULL, sequence INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE writers (client_id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v4: anonymous writer owners prefixed") { db in
            // An anonymous device owned its writer ids under its bare client id, which could spell
            // a user's owner; it now owns them as `a:` + client id (`Principal.writerOwner`). A
            // stored owner that reads as a user's (`u<n>:` then n bytes) stays a user's.
            try db.execute(sql: """
                UPDATE writers SET owner = 'a:' || owner
                WHERE NOT (owner GLOB 'u[1-9]*:*'
                           AND NOT substr(owner, 2, instr(owner, ':') - 2) GLOB '*[^0-9]*'
                           AND CAST(substr(owner, 2, instr(owner, ':') - 2) AS INTEGER)
                               = length(CAST(substr(owner, instr(owner, ':') + 1) AS BLOB)))
                """)
        }
        return migrator
    }

    // MARK: Service

    /// Prunes old tombstones every `pruneInterval` of the configured clock until the service group
    /// shuts down. A failed pruning is logged and tried again at the next interval.
    public func run() async throws {
        let configuration = self.configuration
        await cancelWhenGracefulShutdown {
            await pruneEvery(configuration.pruneInterval, on: configuration.clock, retention: configuration.tombstoneRetention,
                             now: configuration.now, logger: configuration.logger) { date in
                try await self.pruneTombstones(olderThan: date)
            }
        }
    }

    public func observeCommits(_ observer: @escaping @Sendable (CommitNotice) -> Void) {
        observers.add(observer)
    }

    func publish(_ notice: CommitNotice) {
        observers.publish(notice)
    }

    // MARK: Writes

    /// True while the group commit drain runs; it then reports once more before it stops.
    public func commitsUnderWay() -> Bool {
        queue.promiseReport()
    }

    public func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void) {
        groupSizes.add(observer)
    }

    /// The database's files: the main file, its write-ahead log and its shared-memory index.
    public func storeSize() async -> Int? {
        let path = pool.path
        return [path, path + "-wal", path + "-shm"].reduce(0) { total, file in
            total + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0)
        }
    }

    public func commit(_ requests: [[Mutation]], limits: ServerLimits, clientID: String?, authorizer: WriteAuthorizer?) async -> [Result<CommitResult, TandemError>] {
        await CommitPlanner.commit(requests, limits: limits, clientID: clientID, authorizer: authorizer) { submission in
            try await queue.submit(submission) {
                pool.asyncWriteWithoutTransaction { db in
                    self.queue.drain { submissions, mustReport in
                        self.groupSizes.publish(submissions.count)
                        return self.commitTogether(submissions, db: db, mustReport: mustReport)
                    } idle: {
                        self.publish(CommitNotice(batches: [], visibleThrough: self.lastVersion.withLock { $0 }))
                    }
                }
            }
        }
    }

    /// Deletes tombstones (and the records of decided mutations) last written before `date`, keeping
    /// each client's newest record. Returns how many tombstones went. Listeners resuming from before
    /// the newest pruned one get a full snapshot; a pruned record's id is answered `unknown`.
    @discardableResult
    public func pruneTombstones(olderThan date: Date) async throws -> Int {
        let cutoff = WireTimestamp.milliseconds(date)
        let current = Int64(lastVersion.withLock { $0 }.rawValue)
        return try await pool.write { db in
            // Recorded first, so the version sequence never goes back once the rows holding the
            // newest versions are pruned.
            try db.execute(sql: "UPDATE meta SET value = max(value, ?) WHERE key = 'version'", arguments: [current])
            let newest = try Int64.fetchOne(db, sql: "SELECT max(version) FROM documents WHERE data IS NULL AND update_time < ?", arguments: [cutoff])
            // Each client's newest record stays: it is the client's high-water mark. What goes is
            // remembered per client, so a replay of it is answered unknown, not taken as new.
            let prunable = """
                FROM mutation_results WHERE commit_time < ? AND sequence <
                    (SELECT max(newer.sequence) FROM mutation_results AS newer WHERE newer.client_id = mutation_results.client_id)
                """
            try db.execute(sql: """
                INSERT INTO pruned_clients (client_id, sequence) SELECT client_id, max(sequence) \(prunable) GROUP BY client_id
                ON CONFLICT (client_id) DO UPDATE SET sequence = max(sequence, excluded.sequence)
                """, arguments: [cutoff])
            try db.execute(sql: "DELETE \(prunable)", arguments: [cutoff])
            guard let newest else { return 0 }
            try db.execute(sql: "DELETE FROM documents WHERE data IS NULL AND update_time < ?", arguments: [cutoff])
            let count = db.changesCount
            try db.execute(sql: "UPDATE meta SET value = max(value, ?) WHERE key = 'pruned_through'", arguments: [newest])
            return count
        }
    }

    // MARK: Reads

    public func currentVersion() async throws -> Version {
        lastVersion.withLock { $0 }
    }

    public func read(_ target: ListenTarget) async throws -> StoreSnapshot {
        try await readDatabase { db in
            let version = try Self.committedVersion(db)
            switch target {
            case .document(let path):
                return StoreSnapshot(documents: try Self.fetchDocument(db, path: path).map { [$0] } ?? [], version: version)
            case .collection(let path, let query):
                let rows = try Self.fetchDocuments(db, sql: "SELECT * FROM documents WHERE collection = ? AND data IS NOT NULL", arguments: [path.description])
                return StoreSnapshot(documents: try query.evaluate(rows), version: version)
            case .collectionGroup(let group, let query):
                let rows = try Self.fetchDocuments(db, sql: "SELECT * FROM documents WHERE collection_group = ? AND data IS NOT NULL", arguments: [group])
                return StoreSnapshot(documents: try query.evaluate(rows), version: version)
            }
        }
    }

    public func collectionIDs(under parent: DocumentPath?) async throws -> [String] {
        let prefix = CollectionListing.prefix(of: parent)
        return try await readDatabase { db in
            // Every collection at or below the parent, through the collection index; the ones
            // directly under it are picked here.
            let collections = try String.fetchAll(db, sql: """
                SELECT DISTINCT collection FROM documents
                WHERE data IS NOT NULL AND substr(collection, 1, length(?1)) = ?1
                """, arguments: [prefix])
            return CollectionListing.sorted(collections.compactMap { CollectionListing.directChild($0, prefix: prefix) })
        }
    }

    public func collectionGroups() async throws -> [String] {
        try await readDatabase { db in
            CollectionListing.sorted(try String.fetchAll(db, sql: "SELECT DISTINCT collection_group FROM documents WHERE data IS NOT NULL"))
        }
    }

    public func changes(since version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try await changes(since: version, in: target, limit: limit, fromStart: version == .zero)
    }

    public func changes(continuingFromStartAfter version: Version, in target: ListenTarget?, limit: Int) async throws -> ChangePage {
        try await changes(since: version, in: target, limit: limit, fromStart: true)
    }

    /// A page of the feed; `fromStart`: of a read that began at version 0, served whatever was pruned.
    private func changes(since version: Version, in target: ListenTarget?, limit: Int, fromStart: Bool) async throws -> ChangePage {
        let limit = max(1, limit)
        return try await readDatabase { db in
            let current = try Self.committedVersion(db)
            if version > current {
                throw TandemError(.outOfRange, "Version \(version) is beyond this server's newest, \(current): the server's data is not the history this version came from (restored from a backup, or replaced). Reload a full snapshot.")
            }
            let prunedThrough = try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'pruned_through'") ?? 0
            // A read from the beginning needs no tombstones (its reader holds only what its pages
            // gave it): it is served whatever was pruned.
            if !fromStart, Int64(version.rawValue) < prunedThrough {
                throw TandemError(.outOfRange, "Changes since version \(version) are no longer kept (tombstones through \(prunedThrough) were pruned); reload a full snapshot, or fetch again from version 0.")
            }
            var scope = ""
            var scopeArguments = StatementArguments()
            switch target {
            case .document(let path)?:
                scope = " AND path = ?"
                scopeArguments = [path.description]
            case .collection(let path, _)?:
                scope = " AND collection = ?"
                scopeArguments = [path.description]
            case .collectionGroup(let group, _)?:
                scope = " AND collection_group = ?"
                scopeArguments = [group]
            case nil:
                break
            }
            let since = Int64(version.rawValue)
            var rows = try Self.fetchChanges(db, sql: "SELECT * FROM documents WHERE version > ?\(scope) ORDER BY version, path LIMIT ?", arguments: [since] + scopeArguments + [limit])
            var hasMore = false
            var pageVersion = current
            if rows.count == limit, let last = rows.last?.version {
                // Finish the last commit whole, then see whether anything follows it.
                let through = Int64(last.rawValue)
                rows = try Self.fetchChanges(db, sql: "SELECT * FROM documents WHERE version > ? AND version <= ?\(scope) ORDER BY version, path", arguments: [since, through] + scopeArguments)
                hasMore = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM documents WHERE version > ?\(scope))", arguments: [through] + scopeArguments) ?? false
                if hasMore { pageVersion = Version(UInt64(through)) }
            }
            if let query = target?.query {
                let compiled = try CompiledQuery(query)
                rows = rows.map { change in
                    guard let document = change.document, !compiled.matchesFiltersAndCursors(document.data) else { return change }
                    return RemoteChange(path: change.path, document: nil, version: change.version, mutationID: change.mutationID)
                }
            }
            return ChangePage(changes: rows, version: pageVersion, hasMore: hasMore)
        }
    }

    func readDatabase<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await pool.read(body)
        } catch let error as TandemError {
            throw error
        } catch is CancellationError {
            throw TandemError(.cancelled, "The read was cancelled.")
        } catch {
            throw TandemError(.unavailable, "The server database failed to read: \(error).", cause: error)
        }
    }

    /// The newest version a database holds, as the store reads it at start: commits keep no
    /// counter of their own, so it is the newest one any row holds, or the one recorded when rows
    /// were pruned or a commit wrote none.
    static func newestVersion(_ db: Database) throws -> Version {
        Version(UInt64(max(0, try Int64.fetchOne(db, sql: """
            SELECT max(
                (SELECT coalesce(max(value), 0) FROM meta),
                (SELECT coalesce(max(version), 0) FROM documents),
                (SELECT coalesce(max(version), 0) FROM mutation_results))
            """) ?? 0)))
    }

    /// The version a read's snapshot reflects: the newest document version it sees, or the one
    /// recorded at pruning. (A commit that changed no document may be newer; it has nothing to show.)
    static func committedVersion(_ db: Database) throws -> Version {
        let statement = try db.cachedStatement(sql: """
            SELECT max(
                (SELECT coalesce(max(value), 0) FROM meta WHERE key = 'version'),
                (SELECT coalesce(max(version), 0) FROM documents))
            """)
        return Version(UInt64(try Int64.fetchOne(statement) ?? 0))
    }
}
