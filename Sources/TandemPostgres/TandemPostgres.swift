import TandemServer

/// PostgreSQL support for the Tandem server: a `ServerStore` on PostgreSQL shared by several
/// `tandem serve` nodes, which fan changes out to each other with LISTEN/NOTIFY.
///
/// This module holds its place in the dependency order (`TandemServer` → `TandemPostgres`); the store
/// itself arrives with the server's PostgreSQL issue.
public enum TandemPostgres {}
