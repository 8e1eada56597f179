import Foundation
import Tandem
import TandemCore
import TandemTesting

struct Product: SyncModel, Equatable {
    var id: String
    var name: String
    var price: Double
    var stock: Int

    static var mocks: [Product] {
        [
            Product(id: "lamp", name: "Lamp", price: 30, stock: 3),
            Product(id: "desk", name: "Desk", price: 200, stock: 1),
        ]
    }
}

extension RecordingDataSyncLogger {
    /// The `delay_seconds` of the listener's retry events, in order.
    func retryDelays(_ event: String) -> [Double] {
        events(named: event).compactMap { $0.parameters["delay_seconds"] as? Double }
    }
}

/// Waits, without sleeping, until a condition holds: each check yields to other tasks. Gives up
/// after 30 seconds of checking, so a broken engine fails the test instead of hanging it (a count
/// of rounds was too short when many suites run at once on two cores).
func eventually(_ what: String = "condition", _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .seconds(30))
    while ContinuousClock.now < deadline {
        if condition() { return true }
        await Task.yield()
    }
    return condition()
}
