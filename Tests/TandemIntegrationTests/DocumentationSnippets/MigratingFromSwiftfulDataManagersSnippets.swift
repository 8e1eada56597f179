import Foundation
import Tandem
import TandemCore
import TandemTesting

/// The code of the article "Migrating from SwiftfulDataManagers" (MigratingFromSwiftfulDataManagers.md).
enum MigratingFromSwiftfulDataManagersSnippets {
    // snippet: swiftful-models
    struct UserModel: SyncModel {
        let id: String
        var name: String
        var age: Int

        var eventParameters: [String: any Sendable] { ["user_name": name, "user_age": age] }
        static var mocks: [UserModel] { [UserModel(id: "1", name: "Ada", age: 36)] }
    }

    struct Product: SyncModel {
        let id: String
        var name: String
        var price: Double
        var stock = 0

        static var mocks: [Product] { [Product(id: "lamp", name: "Lamp", price: 30)] }
    }

    struct PrintLogger: DataSyncLogger {
        func trackEvent(_ event: DataSyncLogEvent) { print(event) }
    }
    // end snippet

    static func products(client: TandemClient) async throws {
        // snippet: swiftful-after
        let products = CollectionSyncEngine<Product>(
            remote: TandemRemoteCollectionService(client: client, collectionPath: { "products" }),
            managerKey: "products",
            enableLocalPersistence: true,
            logger: PrintLogger()
        )
        await products.startListening { query in
            query.where("price", isLessThan: 100)
        }
        let shown = products.currentCollection          // the query's answer, pending writes included

        try await products.saveDocument(Product(id: "lamp", name: "Lamp", price: 30))
        try await products.updateDocument(id: "lamp", data: ["price": 29.99, "stock": .increment(-1)])
        try await products.deleteDocument(id: "lamp")
        // end snippet
        _ = shown
    }

    static func user(client: TandemClient) async throws {
        // snippet: swiftful-document
        let user = DocumentSyncEngine<UserModel>(
            remote: TandemRemoteDocumentService(client: client, collectionPath: { "users" }),
            managerKey: "user"
        )
        try await user.startListening(documentId: "user_123")
        try await user.updateDocument(data: ["name": "John", "age": 30])
        let name = user.currentDocument?.name
        user.stopListening(clearCaches: false)
        // end snippet
        _ = name
    }

    static func batch(products: CollectionSyncEngine<Product>) async throws {
        // snippet: swiftful-batch
        try await products.commit { batch in
            batch.save(Product(id: "desk", name: "Desk", price: 90))
            batch.update(id: "chair", data: ["price": 45.0])
            batch.delete(id: "stool")
        }
        // end snippet
    }

    static func previews() {
        // snippet: swiftful-mocks
        let user = DocumentSyncEngine<UserModel>(
            remote: MockRemoteDocumentService(document: UserModel.mocks[0], collectionPath: { "users" }),
            managerKey: "preview-user",
            enableLocalPersistence: false
        )
        let products = CollectionSyncEngine<Product>(
            remote: MockRemoteCollectionService(collection: Product.mocks, collectionPath: { "products" }),
            managerKey: "preview-products",
            enableLocalPersistence: false
        )
        // end snippet
        _ = (user, products)
    }
}
