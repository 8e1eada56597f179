#if os(Linux)
import Foundation
import Testing
import TandemCore
import TandemPostgres
import TandemServer
import TandemTesting

/// The one conformance suite, unchanged, against the PostgreSQL store: each check on a new
/// database of one private cluster.
@Suite("PostgreSQL store conformance", .postgresCluster, .serialized, .timeLimit(.minutes(5)),
       .enabled(if: PostgresClusterTrait.runs, Comment(rawValue: PostgresCluster.unavailableReason ?? "")))
struct PostgresConformanceTests {
    static let subject = ServerStoreConformance.Subject(name: "PostgreSQL") {
        let (_, url) = try await PostgresClusterTrait.freshDatabase()
        let configuration = {
            var configuration = PostgresServerStoreConfiguration()
            configuration.maximumConnections = 4
            // A loaded machine can take seconds to start a backend: the wait is a hang guard.
            configuration.connectionWait = .seconds(60)
            configuration.logger.logLevel = .critical
            return configuration
        }()
        let store = try await PostgresServerStore.open(url: try PostgresURL(url), configuration: configuration)
        let open: @Sendable () async throws -> any ServerStore = { try await PostgresServerStore.open(url: try PostgresURL(url), configuration: configuration) }
        return .init(store: store, reopen: open, openShared: open)
    }

    @Test("PostgresServerStore", arguments: ServerStoreConformance.checks + ServerStoreConformance.sharedChecks)
    func postgres(_ check: ServerStoreConformance.Check) async throws {
        try await check.run(on: Self.subject)
    }
}
#endif
