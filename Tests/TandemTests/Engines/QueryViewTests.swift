import Foundation
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// The view is the query: `currentCollection` is the listened query run over the cache with the
/// pending writes applied, by the same evaluator as the server's.
@Suite("Engine view runs its query")
struct QueryViewTests {
    static let items: [Product] = [
        Product(id: "a", name: "Ash", price: 10, stock: 5),
        Product(id: "b", name: "Birch", price: 40, stock: 0),
        Product(id: "c", name: "Cedar", price: 20, stock: 2),
        Product(id: "d", name: "Deal", price: 300, stock: 1),
        Product(id: "e", name: "Elm", price: 60, stock: 7),
    ]

    func offlineEngine(_ query: @escaping (Query) -> Query, persistence: (any LocalCollectionPersistence)? = nil) async -> (CollectionSyncEngine<Product>, MockRemoteCollectionService) {
        let remote = MockRemoteCollectionService(collection: Self.items, collectionPath: { "products" })
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "view", persistence: persistence, clock: ManualClock())
        await engine.startListening(buildQuery: query)
        remote.store.goOffline()
        return (engine, remote)
    }

    @Test("a local write that leaves the filter leaves the view at once; one that enters it shows")
    func filterFollowsWrites() async throws {
        let (engine, _) = await offlineEngine { $0.whereField("price", isLessThan: 100) }
        #expect(engine.currentCollection.map(\.id) == ["a", "b", "c", "e"])
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 500, stock: 1))
        #expect(engine.currentCollection.map(\.id) == ["a", "b", "c", "e"])
        #expect(engine.getDocument(id: "rug") == nil)
        try await engine.updateDocument(id: "a", data: ["price": 150])
        #expect(engine.currentCollection.map(\.id) == ["b", "c", "e"])
        try await engine.saveDocument(Product(id: "cup", name: "Cup", price: 5, stock: 1))
        #expect(engine.currentCollection.map(\.id) == ["b", "c", "cup", "e"])
        try await engine.deleteDocument(id: "c")
        #expect(engine.currentCollection.map(\.id) == ["b", "cup", "e"])
        #expect(engine.pendingWrites.count == 4)
    }

    @Test("order and limit hold for local writes: one save under limit(to: 2) still shows two")
    func orderAndLimit() async throws {
        let (engine, _) = await offlineEngine { $0.order(by: "price").limit(to: 2) }
        #expect(engine.currentCollection.map(\.id) == ["a", "c"])
        try await engine.saveDocument(Product(id: "cup", name: "Cup", price: 5, stock: 1))
        #expect(engine.currentCollection.map(\.id) == ["cup", "a"])
        try await engine.updateDocument(id: "cup", data: ["price": 15])
        #expect(engine.currentCollection.map(\.id) == ["a", "cup"])
        try await engine.deleteDocument(id: "a")
        #expect(engine.currentCollection.map(\.id) == ["cup", "c"])

        let (last, _) = await offlineEngine { $0.order(by: "price", descending: true).limit(toLast: 2) }
        #expect(last.currentCollection.map(\.id) == ["c", "a"])
        try await last.saveDocument(Product(id: "cup", name: "Cup", price: 15, stock: 1))
        #expect(last.currentCollection.map(\.id) == ["cup", "a"])
    }

    @Test("cursors bound the view, and a new query shows its own answer over the cache at once")
    func cursorsAndQuerySwitch() async throws {
        let (engine, _) = await offlineEngine { $0.order(by: "price").start(after: 10).end(at: 60) }
        #expect(engine.currentCollection.map(\.id) == ["c", "b", "e"])
        try await engine.saveDocument(Product(id: "cup", name: "Cup", price: 60, stock: 1))
        try await engine.saveDocument(Product(id: "jug", name: "Jug", price: 61, stock: 1))
        #expect(engine.currentCollection.map(\.id) == ["c", "b", "cup", "e"])

        // Offline, the new query's listener cannot start, yet the view answers it from the cache
        // (which holds what the first query brought, and the writes).
        await engine.startListening { $0.order(by: "name", descending: true) }
        #expect(engine.currentCollection.map(\.id) == ["jug", "e", "cup", "c", "b"])
    }

    @Test("an acknowledged write outside the query stays out of the view and of the SQLite cache")
    func acknowledgedOutsideQuery() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let remote = MockRemoteCollectionService(collection: Self.items, collectionPath: { "products" })
        let persistence = try SQLiteCollectionPersistence(managerKey: "view", directory: directory.url)
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "view", persistence: persistence, clock: ManualClock())
        await engine.startListening { $0.whereField("price", isLessThan: 100).limit(to: 2) }
        #expect(engine.currentCollection.count == 2)
        try await engine.saveDocument(Product(id: "rug", name: "Rug", price: 500, stock: 1))
        #expect(!engine.hasPendingWrites)
        #expect(engine.currentCollection.map(\.id) == ["a", "b"])
        #expect(engine.getDocument(id: "rug") == nil)
        let cached = try #require(try SQLiteCollectionPersistence(managerKey: "view", directory: directory.url).load())
        #expect(!cached.documents.map(\.path.id).contains("rug"))
        #expect(remote.store.documents[try DocumentPath("products/rug")] != nil)
    }

    @Test("property: for random documents, queries and offline writes, the view is the query over what the engine knows")
    func randomWritesMatchEvaluation() async throws {
        for seed in UInt64(1)...100 {
            var random = SeededRandomNumberGenerator(seed: seed)
            let query = Self.randomQuery(&random)
            let (engine, remote) = await offlineEngine { _ in query }
            // What the engine knows: the server's answer to the query, then its own writes.
            var known: [String: Product] = [:]
            for document in try query.evaluate(Array(remote.store.documents.values)) {
                known[document.path.id] = try JSONValueDecoder().decode(Product.self, from: document.data, defaultID: document.path.id)
            }
            #expect(try engine.currentCollection == Self.evaluate(query, known), "seed \(seed), snapshot")
            for step in 0..<12 {
                let id = ["a", "b", "c", "d", "e", "f", "g"].randomElement(using: &random)!
                switch Int.random(in: 0..<4, using: &random) {
                case 0, 1:
                    let product = Product(
                        id: id, name: ["Ash", "Oak", "Yew"].randomElement(using: &random)!,
                        price: Double(Int.random(in: 0...8, using: &random) * 10), stock: Int.random(in: 0...3, using: &random))
                    try await engine.saveDocument(product)
                    known[id] = product
                case 2:
                    let price = Double(Int.random(in: 0...8, using: &random) * 10)
                    try await engine.updateDocument(id: id, data: ["price": .value(.double(price))])
                    known[id]?.price = price
                default:
                    try await engine.deleteDocument(id: id)
                    known[id] = nil
                }
                #expect(try engine.currentCollection == Self.evaluate(query, known), "seed \(seed), step \(step), \(query)")
            }
        }
    }

    static func evaluate(_ query: Query, _ products: [String: Product]) throws -> [Product] {
        let documents = try products.values.map { Document(path: try DocumentPath("products/\($0.id)"), data: try JSONValueEncoder().encodeObject($0)) }
        return try query.evaluate(documents).map { products[$0.path.id]! }
    }

    /// A filter, orders, a limit and a cursor, each drawn or left out.
    static func randomQuery(_ random: inout SeededRandomNumberGenerator) -> Query {
        var query = Query()
        switch Int.random(in: 0..<5, using: &random) {
        case 0: query = query.whereField("price", isLessThan: .double(Double(Int.random(in: 1...8, using: &random) * 10)))
        case 1: query = query.whereField("stock", isGreaterThanOrEqualTo: .int(Int.random(in: 0...3, using: &random)))
        case 2: query = query.whereField("name", in: ["Ash", "Yew"])
        case 3: query = query.whereField("name", isNotEqualTo: "Oak")
        default: break
        }
        let ordered = Bool.random(using: &random)
        if ordered {
            query = query.order(by: Bool.random(using: &random) ? "price" : "stock", descending: Bool.random(using: &random))
            if Bool.random(using: &random) { query = query.order(by: "name") }
            switch Int.random(in: 0..<3, using: &random) {
            case 0: query = query.start(at: .int(Int.random(in: 0...3, using: &random)))
            case 1: query = query.end(before: .int(Int.random(in: 1...60, using: &random)))
            default: break
            }
        }
        switch Int.random(in: 0..<3, using: &random) {
        case 0: query = query.limit(to: Int.random(in: 0...4, using: &random))
        case 1 where ordered: query = query.limit(toLast: Int.random(in: 1...4, using: &random))
        default: break
        }
        return query
    }
}
