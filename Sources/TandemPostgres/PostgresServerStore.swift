import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization
import TandemCore
import TandemServer

/// How a ``PostgresServerStore`` keeps its data and reaches its database.
public struct PostgresServerStoreConfiguration: Sendable {
    /// How long tombstones of deleted documents (and the records of decided mutations) are kept.
    /// Default 30 days.
    public var tombstoneRetention: Duration = .seconds(30 * 24 * 3600)
    /// How often `run()` prunes, on `clock` (one node at a time does). Default hourly.
    public var pruneInterval: Duration = .seconds(3600)
    /// The server's wall clock, for create/update times, `serverTimestamp` and retention.
    public var now: @Sendable () -> Date = { Date() }
    /// The clock `run()` waits on between prunings; tests pass a manual one.
    public var clock: any Clock<Duration> = ContinuousClock()
    /// How long opening a connection may take before it fails: a commit that must open one (the
    /// commits' own connection, after a failure) fails with `unavailable` past it. Default 10 s.
    public var connectTimeout: Duration = .seconds(10)
    /// How long a read waits for a connection of the pool (PostgreSQL down or unreachable) before
    /// it fails with `unavailable`. Default 10 s.
    public var connectionWait: Duration = .seconds(10)
    /// How long any statement may run (a commit's, a read's, a wake-up, a catch-up, a poll, a
    /// pruning): PostgreSQL cancels it then (each session's `statement_timeout`; its transaction
    /// rolls back) and it fails with `unavailable`. Should no answer come at all (a database that
    /// restarts, a network that drops packets without a word), the node gives up at twice this and
    /// 2 s, closes the connection and answers `unavailable` anyway, saying the outcome is unknown:
    /// what was under way never holds the commits queued behind it or the node's shutdown.
    /// Default 30 s.
    public var statementTimeout: Duration = .seconds(30)
    /// The most connections of this node's pool, for reads and listening (at least two); commits
    /// have one more of their own. Default 20.
    public var maximumConnections = 20
    /// How long a node waits for word of other nodes' commits before it looks anyway (PostgreSQL's
    /// notifications are wake-ups, and may be lost), and how often it tells them it is there (a
    /// node heard of within three of its polls is woken at each commit). Default 1 s.
    public var pollInterval: Duration = .seconds(1)
    /// How long a node may go unheard (each poll says it is there) and still hold the commit log:
    /// the log keeps every commit some node running has not read, and forgets a node silent this
    /// long. A node cut off from the database for longer finds, when it is back, that commits it
    /// had not read are gone, and has its listeners load again from where they were. Default 60 s.
    public var nodeTimeout: Duration = .seconds(60)
    /// Where failures and housekeeping are logged.
    public var logger = Logger(label: "tandem.postgres")

    public init() {}
}

/// A ``ServerStore`` on PostgreSQL, which several `tandem serve` nodes can share.
///
/// The same ``CommitPlanner`` as the SQLite store decides every commit, so exactly-once answers,
/// refusals, versions, change feeds and pruning behave the same, and the same conformance suite
/// checks both. Concurrent writers on one node share a transaction (group commit).
///
/// **Versions in visibility order.** A commit takes its versions from a one-row counter whose lock
/// it holds while it writes its rows and moves the counter, in one transaction. The lock is held
/// until the commit, so the commits of every node are numbered in the order they become visible: a
/// reader who has seen version v has seen every commit numbered below v. (A number drawn from a
/// sequence before the commit would not be: a commit numbered lower could become visible after a
/// higher one.) The price is that the commits of all nodes take turns, as they do on one SQLite
/// file.
///
/// **Two round trips a commit.** A group commit reads what its requests depend on in one statement
/// (one snapshot, which also reads the counter and how many commits it has counted), decides in
/// memory, then writes in one statement that takes the counter's lock first and writes only if the
/// count has not moved; that statement's transaction is the commit. If another commit came
/// between, nothing is written and the group is decided again in a transaction that holds the lock
/// from the start.
///
/// ```swift
/// let store = try await PostgresServerStore.open(url: PostgresURL("postgres://tandem@127.0.0.1/tandem"))
/// let server = SyncServer(store: store)
/// ```
public final class PostgresServerStore: ServerStore {
    public let url: PostgresURL
    public let configuration: PostgresServerStoreConfiguration
    let client: PostgresClient
    private let clientTask: Task<Void, Never>
    let logger: Logger
    let queue = GroupCommitQueue<Work, [Result<CommitResult, TandemError>]>()
    /// This node's name in its notifications (so it skips its own) and in `tandem_nodes`.
    let node: String
    /// The channel of the notifications that say a node committed (``CommitNotification``), or is there.
    static let channel = "tandem_commits"
    private let observers = CommitObservers()
    /// Told each group commit's number of requests.
    let groupSizes = Observers<Int>()
    /// The newest version this node has told its observers of: every commit at or below it, from
    /// any node, was told (the drain of `queue` moves it, one drain at a time).
    let published: Mutex<Version>
    /// What other nodes' notifications brought, until a catch-up takes it (``catchUp()``).
    let heardCommits = Mutex(HeardCommits())
    /// Reads whose limit PostgreSQL applied (``PostgresQueryLimit``), for tests.
    package let limitedReads = Atomic<Int>(0)
    /// Commits that found another commit had come between their read and their write, and were
    /// decided again under the counter's lock, for tests.
    package let conflicts = Atomic<Int>(0)
    /// Runs between a commit's unlocked read and its write, for tests that commit through another
    /// node in that gap.
    package let betweenReadAndWrite = Mutex<TestHook?>(nil)
    /// The connection the drain commits and catches up on (``withDrainConnection(_:)``), and how
    /// many it has opened, for tests.
    let drainConnection = Mutex<PostgresConnection?>(nil)
    package let drainConnections = Atomic<Int>(0)
    /// The connection this node listens on, while it does (``follow()``).
    let listeningConnection = Mutex<PostgresConnection?>(nil)
    /// Commits that notified other nodes, for tests.
    package let wakeUpsSent = Atomic<Int>(0)
    /// Catch-ups that read the commit log, for tests: a commit carried in its notification needs none.
    package let logReads = Atomic<Int>(0)
    /// This node's polls, and the poll at which it last heard each other node
    /// (``otherNodesListening``).
    let others = Mutex<(polls: Int, heardAt: [Substring: Int])>((0, [:]))
    /// A trim of the commit log runs (``trimInBackground()``).
    let trimming = Atomic<Bool>(false)
    /// Told of each catch-up's timing, for the benchmark's account of where cross-node time goes.
    package let catchUpTimings = Observers<CatchUpTiming>()
    /// Runs when this node hears another node after hearing none, for tests.
    package let otherNodeHeard = Mutex<TestHook?>(nil)

    /// Connects to the database at `url`, creates or migrates its schema, and opens the store.
    /// A URL it cannot use, a database it cannot reach or sign in to, or a schema it cannot create
    /// fails here, within `connectTimeout`, with a message saying which.
    public static func open(url: PostgresURL, configuration: PostgresServerStoreConfiguration = PostgresServerStoreConfiguration()) async throws -> PostgresServerStore {
        let logger = configuration.logger
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(connectTimeout: configuration.connectTimeout), id: 0, logger: logger)
        } catch {
            throw TandemError(.unavailable, "Could not connect to PostgreSQL at \(url): \(Self.reason(error)). Check the URL (host, port, user, password, database) and that the server is running.", cause: error)
        }
        let version: Version
        let node = UUID().uuidString
        do {
            try await checkServer(connection, url: url, logger: logger)
            try await migrate(connection, logger: logger)
            version = try await register(node, over: connection, logger: logger)
            try? await connection.close()
        } catch let error as TandemError {
            try? await connection.close()
            throw error
        } catch {
            try? await connection.close()
            throw TandemError(.unavailable, "Could not create or migrate Tandem's tables in PostgreSQL at \(url): \(Self.reason(error)). The user needs to be allowed to create tables in the database.", cause: error)
        }
        return PostgresServerStore(url: url, configuration: configuration, client: PostgresClient(configuration: try url.clientConfiguration(connectTimeout: configuration.connectTimeout, maximumConnections: configuration.maximumConnections,
                                                                                                                                        statementTimeout: configuration.statementTimeout), backgroundLogger: logger), version: version, node: node)
    }

    private init(url: PostgresURL, configuration: PostgresServerStoreConfiguration, client: PostgresClient, version: Version, node: String) {
        self.node = node
        self.url = url
        self.configuration = configuration
        self.client = client
        logger = configuration.logger
        published = Mutex(version)
        clientTask = Task { await client.run() }
    }

    deinit {
        close()
    }

    /// Closes the store's connections. Calls after this fail with `unavailable`.
    public func close() {
        clientTask.cancel()
        // The task keeps the connection until it is closed (dropped open, postgres-nio traps).
        if let connection = drainConnection.withLock({ connection in defer { connection = nil }; return connection }) {
            Task { try? await connection.close() }
        }
    }

    /// The server must be PostgreSQL 13 or newer (for `normalize`) with a UTF-8 database.
    private static func checkServer(_ connection: PostgresConnection, url: PostgresURL, logger: Logger) async throws {
        var version = 0
        var encoding = ""
        for try await (number, name) in try await connection.query("SELECT current_setting('server_version_num')::int, current_setting('server_encoding')", logger: logger).decode((Int, String).self) {
            (version, encoding) = (number, name)
        }
        guard version >= 130_000 else {
            throw TandemError(.failedPrecondition, "PostgreSQL at \(url) is version \(version / 10_000); Tandem needs 13 or newer.")
        }
        guard encoding.uppercased() == "UTF8" else {
            throw TandemError(.failedPrecondition, "The database at \(url) is encoded in \(encoding); Tandem needs a UTF8 database (CREATE DATABASE … ENCODING 'UTF8').")
        }
    }

    /// What went wrong, in words: PostgreSQL's own message when it sent one.
    static func reason(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                return "\(message)\(error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? "")"
            }
            return "\(error.code)"
        }
        return "\(error)"
    }

    // MARK: Service

    /// Until the service group shuts down: hears of other nodes' commits (``follow()``), and prunes
    /// every `pruneInterval` of the configured clock (one node at a time: the others find the
    /// pruning lock taken and skip their turn). Then closes the store's connections.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.follow() }
                group.addTask { await self.prune() }
            }
        }
        close()
    }

    private func prune() async {
        await pruneEvery(configuration.pruneInterval, on: configuration.clock, retention: configuration.tombstoneRetention,
                         now: configuration.now, logger: logger) { date in
            try await self.pruneTombstones(olderThan: date)
        }
    }

    public func observeCommits(_ observer: @escaping @Sendable (CommitNotice) -> Void) {
        observers.add(observer)
    }

    func publish(_ notice: CommitNotice) {
        observers.publish(notice)
    }

    public func commitsUnderWay() -> Bool {
        queue.promiseReport()
    }

    public func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void) {
        groupSizes.add(observer)
    }

    /// The database's size as PostgreSQL counts it (`pg_database_size`), which other nodes share.
    public func storeSize() async -> Int? {
        try? await reading { connection in
            var size = 0
            for try await bytes in try await connection.query("SELECT pg_database_size(current_database())", logger: self.logger).decode(Int64.self) {
                size = Int(bytes)
            }
            return size
        }
    }

    // MARK: Reads

    /// The columns every document read selects, in this order.
    static let documentColumns = "d.path, d.version, d.create_time, d.update_time, d.data, d.mutation_client, d.mutation_sequence"

    public func currentVersion() async throws -> Version {
        try await reading { connection in try await Self.counter(connection, logger: self.logger) }
    }

    public func collectionIDs(under parent: DocumentPath?) async throws -> [String] {
        let prefix = CollectionListing.prefix(of: parent)
        guard PostgresQueryFilter.storable(prefix) else { return [] }
        return try await reading { connection in
            var collections: [String] = []
            for try await collection in try await connection.query(
                "SELECT DISTINCT collection FROM tandem_documents WHERE data IS NOT NULL AND starts_with(collection, \(prefix))",
                logger: self.logger).decode(String.self) {
                collections.append(collection)
            }
            return CollectionListing.sorted(collections.compactMap { CollectionListing.directChild($0, prefix: prefix) })
        }
    }

    public func collectionGroups() async throws -> [String] {
        try await reading { connection in
            var groups: [String] = []
            for try await group in try await connection.query("SELECT DISTINCT collection_group FROM tandem_documents WHERE data IS NOT NULL", logger: self.logger).decode(String.self) {
                groups.append(group)
            }
            return CollectionListing.sorted(groups)
        }
    }

    public func read(_ target: ListenTarget) async throws -> StoreSnapshot {
        let (scope, value): (String, String) = switch target {
        case .document(let path): ("d.path", path.description)
        case .collection(let path, _): ("d.collection", path.description)
        case .collectionGroup(let group, _): ("d.collection_group", group)
        }
        // PostgreSQL's text cannot hold NUL, so no document it keeps is under such a path.
        guard PostgresQueryFilter.storable(value) else { return StoreSnapshot(documents: [], version: try await currentVersion()) }
        // The filters PostgreSQL can apply without losing a match, and the cursors and limit it
        // can apply in the query's order (``PostgresQueryOrder``), narrow what is read. The shared
        // evaluator decides the rest, and every candidate, below.
        let compiled = try target.query.map { query throws(TandemError) in try CompiledQuery(query) }
        let filter = target.query.flatMap { PostgresQueryFilter($0, firstPlaceholder: 2) }
        let order = compiled.flatMap { PostgresQueryOrder($0, firstPlaceholder: 2 + (filter?.binds.count ?? 0)) }
        var binds = Self.binds(value)
        for bind in (filter?.binds ?? []) + (order?.binds ?? []) { bind.append(to: &binds) }
        let conditions = ((filter.map { [$0.conditions] } ?? []) + (order?.bounds ?? [])).joined(separator: " AND ")
        let documents: [Document]
        let version: Version
        if let compiled, let order, let limit = order.limit {
            (documents, version) = try await readInOrder(scope: scope, value: value, binds: binds, conditions: conditions, order: order, limit: limit, compiled: compiled)
        } else {
            // One statement, so one snapshot: the counter and the rows agree.
            let sql = """
                SELECT c.version, \(Self.documentColumns) FROM tandem_counter AS c
                LEFT JOIN tandem_documents AS d ON \(scope) = $1 AND d.data IS NOT NULL\(conditions.isEmpty ? "" : " AND (d.body IS NULL OR (\(conditions)))")
                WHERE c.id = 1 ORDER BY d.path
                """
            (documents, version) = try await reading { [binds] connection -> ([Document], Version) in
                let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: self.logger)
                var documents: [Document] = []
                var version = Version.zero
                for try await row in rows {
                    let cells = row.makeRandomAccess()
                    version = Version(UInt64(try cells[0].decode(Int64.self)))
                    if let change = try Self.change(cells, from: 1), let document = change.document { documents.append(document) }
                }
                return (documents, version)
            }
        }
        switch target {
        case .document:
            return StoreSnapshot(documents: documents, version: version)
        case .collection, .collectionGroup:
            return StoreSnapshot(documents: compiled?.evaluate(documents) ?? documents, version: version)
        }
    }

    /// The candidates of a limited query, read in its order (`keys`, then path) a page at a time,
    /// in one snapshot: until the documents read whose keys lie wholly before the last one read
    /// hold `limit`'s count that pass the query exactly (then no document unread comes before
    /// them), or none is left. With the documents PostgreSQL could not hold as `jsonb`, which are
    /// always candidates. `binds` holds `$1` (the scope's `value`) and the placeholders of
    /// `conditions` and `keys`.
    private func readInOrder(scope: String, value: String, binds: PostgresBindings, conditions: String, order: PostgresQueryOrder, limit: CompiledQuery.Limit,
                             compiled: CompiledQuery) async throws -> ([Document], Version) {
        let (count, backward) = switch limit {
        case .first(let count): (count, false)
        case .last(let count): (count, true)
        }
        limitedReads.add(1, ordering: .relaxed)
        // Read from the end the limit keeps: in the order's direction, or against it for the last n.
        let downward = order.descending != backward
        let direction = downward ? "DESC" : "ASC"
        let beyond = downward ? "<" : ">"
        let keys = order.keys
        let ordering = (keys.indices.map { "k\($0) \(direction)" } + ["path \(direction)"]).joined(separator: ", ")
        let selected = keys.enumerated().map { "\($1) AS k\($0)" }.joined(separator: ", ")
        let row = "ROW(\(keys.indices.map { "k\($0)" }.joined(separator: ", ")), path)"
        return try await readingConsistently { [binds] connection -> ([Document], Version) in
            let version = try await Self.counter(connection, logger: self.logger)
            var documents = try await self.changes(connection, sql: """
                SELECT \(Self.documentColumns) FROM tandem_documents AS d WHERE \(scope) = $1 AND d.data IS NOT NULL AND d.body IS NULL
                """, binds: Self.binds(value)).compactMap(\.document)
            guard count > 0 else { return (documents, version) }
            var pageSize = count + 1
            var last: (key: PostgresQueryOrder.Key, path: String)?
            // The keys of the documents read that pass the query exactly.
            var passing: [PostgresQueryOrder.Key] = []
            while true {
                var pageBinds = binds
                var after = ""
                if let last {
                    let first = pageBinds.count + 1
                    pageBinds.append(last.key.rank)
                    pageBinds.append(last.key.integerPart)
                    pageBinds.append(ByteBuffer(bytes: last.key.bytes))
                    pageBinds.append(last.path)
                    after = " WHERE \(row) \(beyond) ROW($\(first)::bigint, $\(first + 1)::bigint, $\(first + 2)::bytea, $\(first + 3)::text)"
                }
                pageBinds.append(Int64(pageSize))
                let sql = """
                    SELECT * FROM (
                        SELECT \(selected), d.path AS path, \(Self.documentColumns.replacingOccurrences(of: "d.path, ", with: "")) FROM tandem_documents AS d
                        WHERE \(scope) = $1 AND d.data IS NOT NULL AND d.body IS NOT NULL\(conditions.isEmpty ? "" : " AND \(conditions)")
                    ) AS candidates\(after)
                    ORDER BY \(ordering) LIMIT $\(pageBinds.count)
                    """
                var read = 0
                for try await cells in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: pageBinds), logger: self.logger) {
                    let cells = cells.makeRandomAccess()
                    read += 1
                    let key = PostgresQueryOrder.Key(rank: try cells[0].decode(Int64.self), integerPart: try cells[1].decode(Int64.self),
                                                     bytes: Array(try cells[2].decode(ByteBuffer.self).readableBytesView))
                    guard let change = try Self.change(cells, from: keys.count), let document = change.document else { continue }
                    documents.append(document)
                    if compiled.matchesFiltersAndCursors(document.data) { passing.append(key) }
                    last = (key, document.path.description)
                }
                guard read == pageSize, let last else { break }
                let before = passing.count { key in downward ? last.key < key : key < last.key }
                if before >= count { break }
                pageSize = min(pageSize * 4, 4_096)
            }
            return (documents, version)
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
        let (scope, value): (String, String?) = switch target {
        case .document(let path)?: (" AND d.path = $2", path.description)
        case .collection(let path, _)?: (" AND d.collection = $2", path.description)
        case .collectionGroup(let group, _)?: (" AND d.collection_group = $2", group)
        case nil: ("", nil)
        }
        if let value, !PostgresQueryFilter.storable(value) {
            // No document PostgreSQL keeps is under a path with NUL: nothing changed there.
            let current = try await currentVersion()
            if version > current {
                throw TandemError(.outOfRange, "Version \(version) is beyond this server's newest, \(current): the server's data is not the history this version came from (restored from a backup, or replaced). Reload a full snapshot.")
            }
            return ChangePage(changes: [], version: current, hasMore: false)
        }
        let since = Int64(clamping: version.rawValue)
        @Sendable func binds(_ first: Int64, _ rest: Int64...) -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(first)
            if let value { binds.append(value) }
            for more in rest { binds.append(more) }
            return binds
        }
        let next = value == nil ? 2 : 3
        var (rows, current, hasMore) = try await readingConsistently { connection -> ([RemoteChange], Version, Bool) in
            var current = Version.zero
            var prunedThrough: Int64 = 0
            for try await (counter, pruned) in try await connection.query("""
                SELECT c.version, m.value FROM tandem_counter AS c, tandem_meta AS m WHERE c.id = 1 AND m.key = 'pruned_through'
                """, logger: self.logger).decode((Int64, Int64).self) {
                current = Version(UInt64(counter))
                prunedThrough = pruned
            }
            if version > current {
                throw TandemError(.outOfRange, "Version \(version) is beyond this server's newest, \(current): the server's data is not the history this version came from (restored from a backup, or replaced). Reload a full snapshot.")
            }
            // A read from the beginning needs no tombstones (its reader holds only what its pages
            // gave it): it is served whatever was pruned.
            if !fromStart, since < prunedThrough {
                throw TandemError(.outOfRange, "Changes since version \(version) are no longer kept (tombstones through \(prunedThrough) were pruned); reload a full snapshot, or fetch again from version 0.")
            }
            var rows = try await self.changes(connection, sql: "SELECT \(Self.documentColumns) FROM tandem_documents AS d WHERE d.version > $1\(scope) ORDER BY d.version, d.path LIMIT $\(next)", binds: binds(since, Int64(limit)))
            var hasMore = false
            if rows.count == limit, let last = rows.last?.version {
                // Finish the last commit whole, then see whether anything follows it.
                let through = Int64(last.rawValue)
                rows = try await self.changes(connection, sql: "SELECT \(Self.documentColumns) FROM tandem_documents AS d WHERE d.version > $1\(scope) AND d.version <= $\(next) ORDER BY d.version, d.path", binds: binds(since, through))
                for try await exists in try await connection.query(PostgresQuery(unsafeSQL: "SELECT EXISTS (SELECT 1 FROM tandem_documents AS d WHERE d.version > $1\(scope))", binds: binds(through)), logger: self.logger).decode(Bool.self) {
                    hasMore = exists
                }
                if hasMore { current = Version(UInt64(through)) }
            }
            return (rows, current, hasMore)
        }
        if let query = target?.query {
            let compiled = try CompiledQuery(query)
            rows = rows.map { change in
                guard let document = change.document, !compiled.matchesFiltersAndCursors(document.data) else { return change }
                return RemoteChange(path: change.path, document: nil, version: change.version, mutationID: change.mutationID)
            }
        }
        return ChangePage(changes: rows, version: current, hasMore: hasMore)
    }

    /// The rows of a query selecting ``documentColumns``, as changes.
    func changes(_ connection: PostgresConnection, sql: String, binds: PostgresBindings) async throws -> [RemoteChange] {
        var changes: [RemoteChange] = []
        for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
            if let change = try Self.change(row.makeRandomAccess(), from: 0) { changes.append(change) }
        }
        return changes
    }

    /// The change a row holds in ``documentColumns`` from column `first` (nil when they are NULL,
    /// as a LEFT JOIN that met no row leaves them).
    static func change(_ cells: PostgresRandomAccessRow, from first: Int) throws -> RemoteChange? {
        guard let text = try cells[first].decode(String?.self) else { return nil }
        guard let path = DocumentPath(trusted: text) else {
            throw TandemError(.dataLoss, "The stored path '\(text)' is not a document path.")
        }
        let version = Version(UInt64(try cells[first + 1].decode(Int64.self)))
        let client = try cells[first + 5].decode(String?.self)
        let sequence = try cells[first + 6].decode(Int64?.self)
        let id = client.flatMap { client in sequence.map { MutationID(clientID: client, sequence: UInt64(bitPattern: $0)) } }
        guard let body = try cells[first + 4].decode(String?.self) else {
            return RemoteChange(path: path, document: nil, version: version, mutationID: id)
        }
        guard case .object(let data)? = try? JSONText.parse(body) else {
            throw TandemError(.dataLoss, "The stored row of \(path) is damaged: its body is not a JSON object.")
        }
        let document = Document(path: path, data: data, version: version,
                                createTime: WireTimestamp.date(milliseconds: try cells[first + 2].decode(Int64.self)),
                                updateTime: WireTimestamp.date(milliseconds: try cells[first + 3].decode(Int64.self)))
        return RemoteChange(path: path, document: document, version: version, mutationID: id)
    }

    static func counter(_ connection: PostgresConnection, logger: Logger) async throws -> Version {
        var version = Version.zero
        for try await value in try await connection.query("SELECT version FROM tandem_counter WHERE id = 1", logger: logger).decode(Int64.self) {
            version = Version(UInt64(value))
        }
        return version
    }

    static func binds(_ values: String...) -> PostgresBindings {
        var binds = PostgresBindings()
        for value in values { binds.append(value) }
        return binds
    }


    // MARK: Pruning

    @discardableResult
    public func pruneTombstones(olderThan date: Date) async throws -> Int {
        let cutoff = WireTimestamp.milliseconds(date)
        return try await reading { connection in
            try await connection.query("BEGIN", logger: self.logger)
            do {
                // One node prunes at a time; another that finds it pruning skips its turn.
                var locked = false
                for try await taken in try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.pruneLock))", logger: self.logger).decode(Bool.self) {
                    locked = taken
                }
                guard locked else {
                    try await connection.query("COMMIT", logger: self.logger)
                    return 0
                }
                // Each client's newest record stays: it is the client's high-water mark. What goes
                // is remembered per client, so a replay of it is answered unknown, not taken as new.
                // Rows a commit holds are skipped (`SKIP LOCKED`), left to the next pruning:
                // pruning never waits for a commit, so the two never wait for each other.
                let prunable = """
                    FROM tandem_mutation_results AS r WHERE (r.client_id, r.sequence) IN (
                        SELECT o.client_id, o.sequence FROM tandem_mutation_results AS o WHERE o.commit_time < $1 AND o.sequence <
                            (SELECT max(newer.sequence) FROM tandem_mutation_results AS newer WHERE newer.client_id = o.client_id)
                        FOR UPDATE SKIP LOCKED)
                    """
                var binds = PostgresBindings()
                binds.append(cutoff)
                // One statement, so what is remembered is exactly what was deleted (a client's
                // newer record committed meanwhile by another node changes neither).
                try await connection.query(PostgresQuery(unsafeSQL: """
                    WITH gone AS (DELETE \(prunable) RETURNING r.client_id, r.sequence)
                    INSERT INTO tandem_pruned_clients (client_id, sequence) SELECT client_id, max(sequence) FROM gone GROUP BY client_id
                    ON CONFLICT (client_id) DO UPDATE SET sequence = greatest(tandem_pruned_clients.sequence, excluded.sequence)
                    """, binds: binds), logger: self.logger)
                var count = 0
                var newest: Int64?
                for try await (gone, version) in try await connection.query(PostgresQuery(unsafeSQL: """
                    WITH gone AS (DELETE FROM tandem_documents WHERE path IN (
                        SELECT path FROM tandem_documents WHERE data IS NULL AND update_time < $1 FOR UPDATE SKIP LOCKED) RETURNING version)
                    SELECT count(*), max(version) FROM gone
                    """, binds: binds), logger: self.logger).decode((Int64, Int64?).self) {
                    count = Int(gone)
                    newest = version
                }
                if let newest {
                    try await connection.query("UPDATE tandem_meta SET value = greatest(value, \(newest)) WHERE key = 'pruned_through'", logger: self.logger)
                }
                try await connection.query("COMMIT", logger: self.logger)
                return count
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: self.logger)
                throw error
            }
        }
    }
}

/// Code a test runs at a point of a commit (boxed, so the mutex holds a reference).
package final class TestHook: Sendable {
    let body: @Sendable () async -> Void
    package init(_ body: @escaping @Sendable () async -> Void) { self.body = body }
}
