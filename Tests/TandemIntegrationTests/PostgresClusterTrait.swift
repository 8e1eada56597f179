#if os(Linux)
import Foundation
import Testing
import TandemTesting

/// One private PostgreSQL cluster for a suite: started before its first test, stopped (and its
/// files deleted) after its last, whether they passed or not. Tests reach it as
/// ``PostgresClusterTrait/cluster``.
///
/// Where PostgreSQL's programs are missing the suite is skipped, saying why, unless
/// `TANDEM_REQUIRE_POSTGRES` is set (CI sets it): then the missing programs fail the run.
struct PostgresClusterTrait: SuiteTrait, TestScoping {
    @TaskLocal static var cluster: PostgresCluster?

    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let cluster = try await PostgresCluster.start()
        do {
            try await Self.$cluster.withValue(cluster) { try await function() }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// The suite's cluster, and a new empty database on it.
    static func freshDatabase() async throws -> (PostgresCluster, String) {
        guard let cluster else { throw ClusterError(message: "no cluster: the suite needs the .postgresCluster trait") }
        let name = "t_\(UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: ""))"
        try await cluster.createDatabase(name)
        return (cluster, cluster.url(database: name))
    }

    /// Whether the suite runs here: PostgreSQL's programs are installed, or CI requires them (and
    /// the suite then fails saying they are missing).
    static var runs: Bool {
        PostgresCluster.unavailableReason == nil || ProcessInfo.processInfo.environment["TANDEM_REQUIRE_POSTGRES"] != nil
    }
}

extension Trait where Self == PostgresClusterTrait {
    static var postgresCluster: PostgresClusterTrait { PostgresClusterTrait() }
}
#endif
