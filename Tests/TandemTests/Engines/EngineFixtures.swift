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
