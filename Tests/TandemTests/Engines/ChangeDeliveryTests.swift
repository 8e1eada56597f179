import Dispatch
import Foundation
import Observation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

@Suite("Change delivery", .timeLimit(.minutes(5)))
struct ChangeDeliveryTests {
    /// Set on the main queue, which runs the main actor's jobs: whether code runs there.
    static let mainQueueKey = DispatchSpecificKey<Bool>()

    static var onMainActor: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }

    @Test("with .mainActor, observers hear every change on the main actor, in order; by default, at once on the writer's thread")
    @MainActor
    func mainActorDelivery() async throws {
        DispatchQueue.main.setSpecific(key: Self.mainQueueKey, value: true)
        #expect(Self.onMainActor)
        let remote = MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock(), changeDelivery: .mainActor)
        await engine.startListening()
        let heard = Locked<[Bool]>([])
        // A change made off the main actor is announced on it.
        for stock in 10..<13 {
            withObservationTracking { _ = engine.currentCollection } onChange: {
                heard.withLock { $0.append(Self.onMainActor) }
            }
            try await Task.detached { try await engine.updateDocument(id: "lamp", data: ["stock": .value(.int(stock))]) }.value
            #expect(await heard.wait { $0.count == stock - 9 })
            #expect(engine.getDocument(id: "lamp")?.stock == stock, "the value is there when the notice comes")
        }
        #expect(heard.value == [true, true, true])

        let immediate = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, clock: ManualClock())
        await immediate.startListening()
        let thread = Locked<Bool?>(nil)
        withObservationTracking { _ = immediate.currentCollection } onChange: { thread.value = Self.onMainActor }
        try await Task.detached { try await immediate.updateDocument(id: "desk", data: ["stock": 4]) }.value
        #expect(thread.value == false, "announced at once, on the writer's thread")
    }
}
