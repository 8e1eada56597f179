import Foundation
import Tandem
import TandemCore

/// The code of the sync-model article (`Sources/Tandem/Tandem.docc/TheSyncModel.md`): compiled,
/// not run.
enum TheSyncModelSnippets {
    struct Product: SyncModel {
        let id: String
        var name: String
        var price: Double
    }

    static func snapshots(products: CollectionSyncEngine<Product>) async {
        // snippet: sync-model-snapshots
        for await snapshot in products.snapshots() {
            for change in snapshot.documentChanges {
                switch change.kind {
                case .added: print("added", change.document.name)
                case .modified: print("changed", change.document.name)
                case .removed: print("removed", change.document.name)
                }
            }
            let saving = snapshot.metadata.hasPendingWrites   // a shown document has writes not yet acknowledged
            let cached = snapshot.metadata.isFromCache        // the server has not answered in this session yet
            print(snapshot.count, saving ? "saving…" : "saved", cached ? "(offline copy)" : "")
        }
        // end snippet
    }

    static func metadata(products: CollectionSyncEngine<Product>, profile: DocumentSyncEngine<Product>) async {
        // snippet: sync-model-metadata
        if products.metadata(id: "lamp").hasPendingWrites { print("lamp: saving…") }
        if products.isFromCache { print("showing the cache") }

        for await snapshot in profile.snapshots() {      // a DocumentSyncEngine's DocumentSnapshot
            print(snapshot.id ?? "-", snapshot.exists, snapshot.metadata.hasPendingWrites)
        }
        // end snippet
    }

    static func apply(_ changes: [RemoteChange], replacingEverything: Bool) {}

    static func rawListener(client: TandemClient, lastApplied: inout Version?) async throws {
        // snippet: sync-model-raw-listen
        let products = ListenTarget.collection(try CollectionPath("products"), Query())
        for try await batch in client.listen(products, resumeFrom: lastApplied) {
            apply(batch.changes, replacingEverything: batch.isSnapshot)
            lastApplied = batch.version                   // store it with what you applied
        }
        // end snippet
    }

    // snippet: sync-model-alerts
    struct ListenerAlerts: DataSyncLogger {
        func trackEvent(_ event: DataSyncLogEvent) {
            guard event.severity == .severe else { return }
            print("sync problem:", event)   // products_listener_fail, products_listener_stopped, …
        }
    }
    // end snippet

    static func bounded(remote: any RemoteCollectionService) {
        // snippet: sync-model-bounded-retries
        var options = EngineConfiguration(logger: ListenerAlerts())
        options.retryPolicy = RetryPolicy(initial: .seconds(2), maximum: .seconds(60), jitter: 0.2, maximumAttempts: 10)
        let products = CollectionSyncEngine<Product>(remote: remote, managerKey: "products", persistence: nil, configuration: options)
        // end snippet
        _ = products
    }
}
