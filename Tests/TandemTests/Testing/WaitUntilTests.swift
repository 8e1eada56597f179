import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// `waitUntil(timeout:clock:_:)`: a wait that gives up at its deadline, for tests without a time
/// limit of their own.
@Suite("Waiting with a deadline", .timeLimit(.minutes(1)))
struct WaitUntilTests {
    @Test("a condition that never holds answers false once the deadline passes on the clock")
    func givesUpAtTheDeadline() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        let waiting = Task { await engine.waitUntil(timeout: .seconds(5), clock: clock) { engine.getDocument(id: "never") != nil } }
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(5))
        #expect(await waiting.value == false)
    }

    @Test("a condition that comes to hold before the deadline answers true, at the change that made it hold")
    func answersAtTheChange() async throws {
        let clock = ManualClock()
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await engine.startListening()
        let waiting = Task { await engine.waitUntil(timeout: .seconds(5), clock: clock) { engine.getDocument(id: "rug") != nil } }
        await clock.waitForSleepers(count: 1)
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 80, stock: 2))
        #expect(await waiting.value)
        #expect(clock.now == ManualClock.Instant(offset: .zero), "answered before any time passed")
    }
}
