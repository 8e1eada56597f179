import Foundation
import Tandem
import TandemCore

/// The code of the offline-and-pending-writes article
/// (`Sources/Tandem/Tandem.docc/OfflineAndPendingWrites.md`): compiled, not run.
enum OfflineAndPendingWritesSnippets {
    struct Product: SyncModel {
        let id: String
        var name: String
        var price: Double
    }

    static func write(products: CollectionSyncEngine<Product>) async throws {
        // snippet: offline-write
        do {
            try await products.saveDocument(Product(id: "lamp", name: "Lamp", price: 30))
            // Acknowledged by the server, or queued on disk while it cannot be reached.
        } catch TandemError.Code.permissionDenied {
            // Refused for good: already rolled back from currentCollection, and in rejectedWrites.
        } catch {
            print("not written:", error)   // another refusal, or the disk would not take it
        }
        // end snippet
    }

    static func batch(products: CollectionSyncEngine<Product>) async throws {
        // snippet: offline-batch
        try await products.commit { batch in            // all or nothing, in one request
            batch.save(Product(id: "desk", name: "Desk", price: 90))
            batch.update(id: "lamp", data: ["price": 25])
            batch.delete(id: "stool")
        }
        // end snippet
    }

    static func pending(products: CollectionSyncEngine<Product>) {
        // snippet: offline-pending
        print(products.pendingWrites.count, "writes wait for the server")
        for write in products.pendingWrites {          // oldest first
            // attempts counts sends, and a write loaded from disk counts as sent once: it may have been
            print(write.id, write.path, "attempts: \(write.attempts)", write.batch.map { "in batch \($0)" } ?? "")
        }
        // end snippet
    }

    static func rejected(products: CollectionSyncEngine<Product>) {
        // snippet: offline-rejected
        for rejected in products.rejectedWrites {
            print("refused:", rejected.mutation.path, rejected.error.code, rejected.error.message)
            products.dismissRejectedWrite(rejected)    // dealt with: it leaves rejectedWrites
        }
        // end snippet
    }

    // snippet: offline-logger
    struct WriteAlerts: DataSyncLogger {
        func trackEvent(_ event: DataSyncLogEvent) {
            if event.name.hasSuffix("_writeRejected") || event.name.hasSuffix("_persist_fail") {
                print("tell the user:", event)   // document_id and error_description in its parameters
            }
        }
    }
    // end snippet

    static func exactlyOnce(client: TandemClient) async throws {
        // snippet: offline-mutation-id
        let id = MutationID(clientID: "\(client.clientID)/inventory", sequence: 41)   // stored with the write
        let sale = Mutation.update(try DocumentPath("products/lamp"), fields: [:], transforms: [.init("stock", .increment(-1))])
        let answer = try await client.commit([sale.identified(by: id)])[0]
        print(answer.status)   // applied; sent again after a lost answer: replayed, and stock drops once
        // end snippet
    }
}
