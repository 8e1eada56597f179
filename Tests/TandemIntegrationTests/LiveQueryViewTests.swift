import Foundation
import Observation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// An engine's view against the real server's answer to the same query, over real WebSockets.
@Suite("Engine views against the real server")
struct LiveQueryViewTests {
    @Test(
        "property: once its writes are acknowledged, an engine's view equals the server's answer to its query",
        .timeLimit(.minutes(5))
    )
    func viewIsTheServersAnswer() async throws {
        let server = try await LiveServer.start()
        let client = RunningClient(server, id: "views")
        await client.client.waitUntilConnected()
        let texts = ["ash", "oak", "yew"]
        for seed in UInt64(1)...24 {
            var random = SeededRandomNumberGenerator(seed: seed)
            let collection = collectionPath("views\(seed)")
            let ids = (0..<9).map { "d\($0)" }
            _ = try await server.store.commit(try ids.prefix(6).map { id in
                .set(try collection.document(id), ["text": .string(texts.randomElement(using: &random)!), "n": .int(Int.random(in: 0...9, using: &random))])
            })
            let remote = TandemRemoteCollectionService(client: client.client, collection: collection)
            let engine = CollectionSyncEngine<Note>(remote: remote, managerKey: "views\(seed)", persistence: nil)
            let query = Self.randomQuery(&random)
            await engine.startListening { _ in query }

            for _ in 0..<10 {
                let id = ids.randomElement(using: &random)!
                switch Int.random(in: 0..<5, using: &random) {
                case 0, 1:
                    try await engine.saveDocument(Note(id: id, text: texts.randomElement(using: &random)!, n: Int.random(in: 0...9, using: &random)))
                case 2:
                    do {
                        try await engine.updateDocument(id: id, data: ["n": .increment(.int(Int.random(in: -3...3, using: &random)))])
                    } catch let error as TandemError where error.code == .notFound {
                        // Refused for good: the document did not exist on the server.
                    }
                case 3:
                    try await engine.deleteDocument(id: id)
                default:
                    // Another client's write, which reaches the engine through its listener only.
                    _ = try await server.store.commit([.set(try collection.document(id), ["text": "oak", "n": .int(Int.random(in: 0...9, using: &random))])])
                }
            }
            #expect(!engine.hasPendingWrites)
            let answer = try await remote.getDocuments(query: query).map {
                try JSONValueDecoder().decode(Note.self, from: $0.data, defaultID: $0.path.id)
            }
            let converged = await until(engine) { engine.currentCollection == answer }
            #expect(converged, "seed \(seed), \(query): the view shows \(engine.currentCollection.map(\.id)), the server \(answer.map(\.id))")
            engine.stopListening()
        }
        await client.stop()
        await server.stop()
    }

    /// A filter, orders, a cursor and a limit, each drawn or left out.
    static func randomQuery(_ random: inout SeededRandomNumberGenerator) -> Query {
        var query = Query()
        switch Int.random(in: 0..<4, using: &random) {
        case 0: query = query.whereField("n", isLessThan: .int(Int.random(in: 2...8, using: &random)))
        case 1: query = query.whereField("text", in: ["ash", "yew"])
        case 2: query = query.whereField("n", isGreaterThanOrEqualTo: .int(Int.random(in: 1...6, using: &random)))
        default: break
        }
        let ordered = Int.random(in: 0..<3, using: &random) > 0
        if ordered {
            query = query.order(by: Bool.random(using: &random) ? "n" : "text", descending: Bool.random(using: &random))
            if Bool.random(using: &random) { query = query.start(after: .int(Int.random(in: 0...4, using: &random))) }
        }
        switch Int.random(in: 0..<3, using: &random) {
        case 0: query = query.limit(to: Int.random(in: 1...4, using: &random))
        case 1 where ordered: query = query.limit(toLast: Int.random(in: 1...4, using: &random))
        default: break
        }
        return query
    }
}

/// Waits until a condition on an engine holds, checking it again at each observed change of its
/// view (no polling, no sleeping). The test's time limit ends a wait that never comes true.
func until<T>(_ engine: CollectionSyncEngine<T>, _ condition: @escaping () -> Bool) async -> Bool {
    let (changes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    defer { continuation.finish() }
    var iterator = changes.makeAsyncIterator()
    while true {
        // The tracking is installed once the read returns: a change between the two wakes no
        // one, so the condition is read again after the install.
        let holds = withObservationTracking { condition() } onChange: { continuation.yield() }
        if holds || condition() { return true }
        guard await iterator.next() != nil else { return condition() }
    }
}

@Suite("Batches against the real server")
struct LiveBatchTests {
    @Test("an engine's batch and a client's batch each commit as one request: all their documents share one version", .timeLimit(.minutes(5)))
    func oneRequestEach() async throws {
        let server = try await LiveServer.start()
        let client = RunningClient(server, id: "batches")
        await client.client.waitUntilConnected()
        let notes = collectionPath("notes")
        let engine = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: client.client, collection: notes), managerKey: "batches", persistence: nil)
        await engine.startListening()
        try await engine.commit { batch in
            batch.save(Note(id: "1", text: "one"))
            batch.save(Note(id: "2", text: "two"))
            batch.update(id: "1", data: ["n": .increment(2)])
        }
        #expect(!engine.hasPendingWrites)
        let one = try #require(try await server.store.document(at: documentPath("notes/1")))
        let two = try #require(try await server.store.document(at: documentPath("notes/2")))
        #expect(one.data["n"] == 2)
        #expect(one.version == two.version)

        // Refused whole: the update of a missing document takes the save with it.
        await #expect(throws: TandemError.self) {
            try await engine.commit { batch in
                batch.save(Note(id: "3", text: "three"))
                batch.update(id: "missing", data: ["n": 1])
            }
        }
        #expect(try await server.store.document(at: documentPath("notes/3")) == nil)
        #expect(engine.getDocument(id: "3") == nil)

        let acknowledgements = try await client.client.commit { batch in
            batch.set(documentPath("notes/4"), ["text": "four", "n": 0])
            batch.delete(documentPath("notes/2"))
        }
        #expect(acknowledgements.count == 2)
        #expect(Set(acknowledgements.map(\.version)).count == 1)
        #expect(try await server.store.document(at: documentPath("notes/2")) == nil)
        let converged = await until(engine) { engine.currentCollection.map(\.id) == ["1", "4"] }
        #expect(converged, "the view shows \(engine.currentCollection.map(\.id))")
        await client.stop()
        await server.stop()
    }
}
