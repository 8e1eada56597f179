import Foundation
import Tandem
import TandemCore

/// The code of the article "Migrating from CohesionKit" (MigratingFromCohesionKit.md).
enum MigratingFromCohesionKitSnippets {
    // snippet: cohesion-models
    struct User: Identifiable, Sendable {
        var id: Int
        var name: String
    }

    struct Product: SyncModel {
        let id: String
        var title: String
    }

    struct Comment: Identifiable, Sendable {
        var id: String
        var text: String
    }

    struct ProductComments: Aggregate {
        var product: Product
        var comments: [Comment]
        var id: String { product.id }

        static var nestedEntities: [NestedEntity<ProductComments>] { [.init(\.product), .init(\.comments)] }
    }
    // end snippet

    static func basics() throws {
        // snippet: cohesion-after
        let identityMap = IdentityMap()

        let user = try identityMap.store(User(id: 42, name: "John Doe"), stamp: Date().timeIntervalSince1970)
        Task {
            for await latest in user.values { print(latest.name) }       // now, then every change
        }

        identityMap.update(User.self, id: 42) { $0.name = "John" }          // false when not stored
        let sameUser = identityMap.find(User.self, id: 42)                 // nil when not stored

        try identityMap.store(user.value, aliased: "current_user")         // held until removed
        let current = identityMap.find(User.self, aliased: "current_user")
        identityMap.removeAlias(User.self, named: "current_user")          // its observers see nil
        // end snippet
        _ = (sameUser, current)
    }

    static func stale(identityMap: IdentityMap) throws {
        // snippet: cohesion-stale
        do {
            _ = try identityMap.store(User(id: 42, name: "Old"), stamp: 1)
        } catch IdentityMapError.Code.staleStamp {
            // a newer John is stored; the map is unchanged
        }
        // end snippet
    }

    static func aggregates(identityMap: IdentityMap, product: Product, comments: [Comment]) throws {
        // snippet: cohesion-aggregate
        let page = try identityMap.store(ProductComments(product: product, comments: comments))
        identityMap.update(Comment.self, id: comments[0].id) { $0.text = "Edited" }
        print(page.value.comments[0].text)                                  // "Edited"
        // end snippet
    }

    static func transaction(identityMap: IdentityMap) throws {
        // snippet: cohesion-transaction
        let team = try identityMap.store(entities: [User(id: 1, name: "Ada"), User(id: 2, name: "Grace")])
        Task {
            for await users in identityMap.values(for: User.self, ids: [1, 2]) { print(users.map(\.name)) }
        }
        try identityMap.transaction { tx in                                  // observers hear once
            try tx.store(User(id: 1, name: "Ada Lovelace"))
            try tx.store(User(id: 2, name: "Grace Hopper"))
        }
        // end snippet
        _ = team
    }

    static func feed(products: CollectionSyncEngine<Product>, identityMap: IdentityMap) async throws {
        // snippet: cohesion-engine
        for await snapshot in products.snapshots() {
            try identityMap.store(snapshot.documents, aliased: "products")
        }
        // end snippet
    }
}
