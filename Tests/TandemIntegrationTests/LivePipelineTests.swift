import Foundation
import Testing
@_spi(Testing) import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// Several write requests in flight at once, and writes decided one by one, over real WebSockets.
@Suite("Pipelined writes against the real server")
struct LivePipelineTests {
    func id(_ client: String, _ sequence: UInt64) -> MutationID { MutationID(clientID: client, sequence: sequence) }

    @Test("a write decided one by one: a refused mutation takes no other with it, and a resend is answered as first decided", .timeLimit(.minutes(5)))
    func writeEach() async throws {
        let server = try await LiveServer.start()
        let stream = RawStream(port: server.port)
        #expect(await stream.hello("each"))
        let mutations = [
            Mutation.set(documentPath("each/x"), ["n": 1]).identified(by: id("each", 1)),
            Mutation.update(documentPath("each/missing"), fields: ["n": 1]).identified(by: id("each", 2)),
            Mutation.set(documentPath("each/y"), ["n": 2]).identified(by: id("each", 3)),
        ]
        stream.send(.writeEach(id: 1, mutations: mutations))
        guard case .ack(1, let first)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(first.map(\.status) == [.applied, .refused, .applied])
        #expect(first[1].error?.code == .notFound)
        #expect(first[0].version < first[2].version, "each write is a commit of its own")
        stream.send(.writeEach(id: 2, mutations: mutations))
        guard case .ack(2, let again)? = await stream.next() else { Issue.record("expected an ack"); return }
        #expect(again.map(\.status) == [.replayed, .refused, .replayed])
        stream.send(.writeEach(id: 3, mutations: (0..<501).map { .set(documentPath("each/many\($0)"), [:]) }))
        guard case .error(3, let error)? = await stream.next() else { Issue.record("expected an error"); return }
        #expect(error.code == .resourceExhausted)
        #expect(try await server.store.document(at: documentPath("each/many0")) == nil)
        await stream.close()

        // Through a client: three requests sent at once, each answered on its own.
        let client = RunningClient(server, id: "each-client")
        await client.client.waitUntilConnected()
        let results = await client.client.commit(requests: [
            WriteRequest([.set(documentPath("p/1"), ["n": 1])]),
            WriteRequest([.set(documentPath("p/2"), [:]), .update(documentPath("p/none"), fields: ["n": 1]), .set(documentPath("p/3"), [:])], isAtomic: false),
            WriteRequest([.set(documentPath("p/4"), [:]), .update(documentPath("p/none"), fields: ["n": 1])]),
        ])
        #expect(results.count == 3)
        #expect((try? results[0].get())?.map(\.status) == [.applied])
        #expect((try? results[1].get())?.map(\.status) == [.applied, .refused, .applied])
        #expect(throws: TandemError.self) { try results[2].get() }
        for (path, exists) in [("p/1", true), ("p/2", true), ("p/3", true), ("p/4", false)] {
            #expect((try await server.store.document(at: documentPath(path)) != nil) == exists, "\(path)")
        }
        await client.stop()
        await server.stop()
    }

    @Test(
        "property: queued writes sent in pipelined windows, the connection dropped at a random point, are each applied exactly once",
        .timeLimit(.minutes(5))
    )
    func dropsAnywhere() async throws {
        let server = try await LiveServer.start()
        var dropped = 0
        for seed in UInt64(1)...20 {
            var random = SeededRandomNumberGenerator(seed: seed)
            let client = RunningClient(server, id: "pipeline\(seed)")
            await client.client.waitUntilConnected()
            let collection = collectionPath("pipeline\(seed)")
            let counters = (0..<4).map { "c\($0)" }
            _ = try await server.store.commit(try counters.map { .set(try collection.document($0), ["text": "counter", "n": 0]) })
            let engine = CollectionSyncEngine<Note>(
                remote: TandemRemoteCollectionService(client: client.client, collection: collection), managerKey: "pipeline\(seed)", persistence: nil)
            let limits = (writesPerRequest: Int.random(in: 1...6, using: &random), requestsInFlight: Int.random(in: 1...5, using: &random))
            engine.core.sendingLimits = limits
            await engine.startListening()
            client.client.setOnline(false)

            var expected = Dictionary(uniqueKeysWithValues: counters.map { ($0, 0) })
            var saved: [String] = []
            var refused = 0
            for step in 0..<Int.random(in: 20...60, using: &random) {
                let counter = counters.randomElement(using: &random)!
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    try await engine.updateDocument(id: counter, data: ["n": .increment(1)])
                    expected[counter]! += 1
                case 5, 6:
                    try await engine.saveDocument(Note(id: "s\(step)", text: "saved"))
                    saved.append("s\(step)")
                case 7, 8:
                    let other = counters.randomElement(using: &random)!
                    try await engine.commit { batch in
                        batch.update(id: counter, data: ["n": .increment(1)])
                        batch.update(id: other, data: ["n": .increment(2)])
                        batch.save(Note(id: "b\(step)", text: "batched"))
                    }
                    expected[counter]! += 1
                    expected[other]! += 2
                    saved.append("b\(step)")
                default:
                    // Refused for good once sent: it must take no other write with it.
                    try await engine.updateDocument(id: "missing\(step)", data: ["n": .increment(1)])
                    refused += 1
                }
            }
            let queued = engine.pendingWrites.count
            let drop = Int.random(in: 0...max(1, queued / max(1, limits.writesPerRequest)), using: &random)
            client.client.dropConnection(afterAcknowledgements: drop)
            client.client.setOnline(true)
            let drained = await until(engine) { !engine.hasPendingWrites }
            #expect(drained)
            if client.client.connectionAttempts > 1 { dropped += 1 }

            let context = "seed \(seed), \(queued) queued, limits \(limits), drop after \(drop) acknowledgements"
            for counter in counters {
                let document = try await server.store.document(at: collection.document(counter))
                #expect(document?.data["n"] == .int(expected[counter]!), "\(context): \(counter)")
            }
            for id in saved {
                #expect(try await server.store.document(at: collection.document(id)) != nil, "\(context): \(id)")
            }
            #expect(engine.rejectedWrites.count == refused, "\(context)")
            #expect(engine.rejectedWrites.allSatisfy { $0.error.code == .notFound }, "\(context)")
            let converged = await until(engine) {
                counters.allSatisfy { engine.getDocument(id: $0)?.n == expected[$0] }
            }
            #expect(converged, "\(context): the view shows \(engine.currentCollection.map { "\($0.id)=\($0.n)" })")
            engine.stopListening()
            await client.stop()
        }
        // Most seeds drop the connection with acknowledgements still to come.
        #expect(dropped >= 10, "\(dropped) of 20 seeds dropped the connection")
        await server.stop()
    }
}
