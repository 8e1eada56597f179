import Foundation
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// The one conformance suite, run unchanged against each store.
@Suite("Store conformance")
struct StoreConformanceTests {
    static let sqlite = ServerStoreConformance.Subject(name: "SQLite") {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-conformance-\(UUID().uuidString)")
        let store = try SQLiteServerStore(directory: directory)
        return .init(store: store) { try SQLiteServerStore(directory: directory) }
    }

    static let memory = ServerStoreConformance.Subject(name: "memory") {
        // Memory keeps nothing across a restart of the process; a reopen is the same store.
        let store = MemoryServerStore(clock: ManualClock())
        return .init(store: store, reopen: { store }, openShared: { store })
    }

    @Test("SQLiteServerStore", arguments: ServerStoreConformance.checks)
    func sqlite(_ check: ServerStoreConformance.Check) async throws {
        try await check.run(on: Self.sqlite)
    }

    @Test("MemoryServerStore", arguments: ServerStoreConformance.checks + ServerStoreConformance.sharedChecks)
    func memory(_ check: ServerStoreConformance.Check) async throws {
        try await check.run(on: Self.memory)
    }
}
