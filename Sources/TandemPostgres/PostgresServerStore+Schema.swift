import Logging
import PostgresNIO
import TandemCore

extension PostgresServerStore {
    /// The schema, one named step at a time. A step is applied once, in a transaction of its own,
    /// and recorded in `tandem_migrations`; a node that starts against a database another node is
    /// migrating waits for it (an advisory lock), then finds the steps done.
    ///
    /// - `tandem_counter`: one row, the newest version and how many commits wrote. Every commit
    ///   holds its lock while it writes and moves it in the same transaction as its rows, so
    ///   commits are numbered in the order they become visible, on every node.
    /// - `tandem_documents`: each document's newest state, or its tombstone (`data` NULL): the
    ///   exact JSON text the server answers with (`data`) and the same as `jsonb` (`body`, NULL when
    ///   PostgreSQL cannot hold it: a string with a NUL character), with its path, collection,
    ///   collection group, version, times, and the mutation that wrote it.
    /// - `tandem_mutation_results`: the decision about each mutation id, kept with the writes it
    ///   decided; `tandem_pruned_clients` the newest sequence pruning removed per client;
    ///   `tandem_writers` the client that owns each writer id; `tandem_meta` what pruning moved.
    /// - `tandem_changes`: the commit log, each commit's changes whole, which other nodes read
    ///   (kept until every node running has read it); `tandem_nodes` each node running, the newest
    ///   version it has read, and when it last said so.
    static let migrations: [(name: String, sql: [String])] = [
        ("v1", [
            """
            CREATE TABLE tandem_counter (
                id integer PRIMARY KEY CHECK (id = 1),
                version bigint NOT NULL
            )
            """,
            "INSERT INTO tandem_counter (id, version) VALUES (1, 0)",
            """
            CREATE TABLE tandem_documents (
                path text PRIMARY KEY,
                collection text NOT NULL,
                collection_group text NOT NULL,
                version bigint NOT NULL,
                create_time bigint NOT NULL,
                update_time bigint NOT NULL,
                data text,
                body jsonb,
                mutation_client text,
                mutation_sequence bigint
            )
            """,
            "CREATE INDEX tandem_documents_by_collection ON tandem_documents (collection, version)",
            "CREATE INDEX tandem_documents_by_group ON tandem_documents (collection_group, version)",
            "CREATE INDEX tandem_documents_by_version ON tandem_documents (version)",
            """
            CREATE TABLE tandem_mutation_results (
                client_id text NOT NULL,
                sequence bigint NOT NULL,
                version bigint NOT NULL,
                commit_time bigint NOT NULL,
                document text,
                status text,
                error_code text,
                error_message text,
                digest bigint,
                PRIMARY KEY (client_id, sequence)
            )
            """,
            "CREATE TABLE tandem_pruned_clients (client_id text PRIMARY KEY, sequence bigint NOT NULL)",
            "CREATE TABLE tandem_writers (client_id text PRIMARY KEY, owner text NOT NULL)",
            "CREATE TABLE tandem_meta (key text PRIMARY KEY, value bigint NOT NULL)",
            "INSERT INTO tandem_meta (key, value) VALUES ('pruned_through', 0)",
        ]),
        ("v2: bodies indexed for containment", [
            // Serves the filters a query can push down (`PostgresQueryFilter`).
            "CREATE INDEX tandem_documents_body ON tandem_documents USING gin (body jsonb_path_ops)",
        ]),
        ("v3: commits counted", [
            // Moved by every commit that writes: a commit that read without the counter's lock
            // writes only if it has not moved since (`Flush`).
            "ALTER TABLE tandem_counter ADD COLUMN commits bigint NOT NULL DEFAULT 0",
        ]),
        ("v4: anonymous writer owners prefixed", [
            // An anonymous device owned its writer ids under its bare client id, which could spell
            // a user's owner; it now owns them as `a:` + client id. A stored owner that reads as a
            // user's (`u<n>:` then n bytes) stays a user's.
            """
            UPDATE tandem_writers SET owner = 'a:' || owner
            WHERE CASE WHEN owner ~ '^u[1-9][0-9]{0,8}:'
                       THEN substring(owner from 2 for position(':' in owner) - 2)::integer
                            <> octet_length(substring(owner from position(':' in owner) + 1))
                       ELSE true END
            """,
        ]),
        ("v5: commit log", [
            // Every commit's changes, whole, by version: how nodes learn each other's commits.
            // `tandem_documents` holds each document's newest state only, so a document written
            // twice before another node read it showed that node its later state alone. Rows
            // stay until every node running has read them (`tandem_nodes`); `log_pruned_through`
            // is the newest version whose rows may be gone. The log starts at the counter: a node
            // of this version learns only the commits after it, so every node is upgraded together.
            """
            CREATE TABLE tandem_changes (
                version bigint NOT NULL,
                path text NOT NULL,
                create_time bigint NOT NULL,
                update_time bigint NOT NULL,
                data text,
                mutation_client text,
                mutation_sequence bigint,
                PRIMARY KEY (version, path)
            )
            """,
            "CREATE TABLE tandem_nodes (node text PRIMARY KEY, read_through bigint NOT NULL, seen_at timestamptz NOT NULL DEFAULT now())",
            "INSERT INTO tandem_meta (key, value) SELECT 'log_pruned_through', version FROM tandem_counter WHERE id = 1",
        ]),
    ]

    /// The advisory lock that one node at a time holds while it migrates.
    static let migrationLock: Int64 = 0x7461_6E64_656D_0001
    /// The advisory lock that one node at a time holds while it prunes.
    static let pruneLock: Int64 = 0x7461_6E64_656D_0002
    /// The advisory lock that one node at a time holds while it trims the commit log.
    static let logLock: Int64 = 0x7461_6E64_656D_0003

    /// Creates or migrates the schema over `connection`. Returns the names of the steps applied.
    @discardableResult
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.query("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
        do {
            try await connection.query("CREATE TABLE IF NOT EXISTS tandem_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())", logger: logger)
            var applied: Set<String> = []
            for try await name in try await connection.query("SELECT name FROM tandem_migrations", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            var done: [String] = []
            for migration in migrations where !applied.contains(migration.name) {
                try await connection.query("BEGIN", logger: logger)
                do {
                    for sql in migration.sql {
                        try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
                    }
                    try await connection.query("INSERT INTO tandem_migrations (name) VALUES (\(migration.name))", logger: logger)
                    try await connection.query("COMMIT", logger: logger)
                } catch {
                    _ = try? await connection.query("ROLLBACK", logger: logger)
                    throw error
                }
                done.append(migration.name)
            }
            try await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
            return done
        } catch {
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
            throw error
        }
    }
}
