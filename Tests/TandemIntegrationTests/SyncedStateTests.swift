import Foundation
import IdentifiedCollections
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

struct Chore: DocumentIdentifiable {
    var clientId = UUID()
    var documentId: String?
    var title: String
    var done = false
}

/// Synced state against the real server on 127.0.0.1, two clients on one collection.
@Suite("Synced state against the real server", .timeLimit(.minutes(5)))
struct SyncedStateTests {
    @Test("a one-field edit writes exactly that field path: a field the app's type does not know, written by another client, survives it on the server")
    func oneFieldEditOnTheServer() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        _ = try await server.store.commit([.set(documentPath("chores/c1"), ["title": "sweep", "done": false, "note": "by the door"])])
        let running = RunningClient(server, id: "one-field")
        let chores = SyncedCollection(CollectionConfiguration<Chore>(collectionPath: "chores"), client: running.client)
        await chores.load()
        // A load before the client is connected returns at once with the cache: the state follows.
        #expect(await chores.waitUntil { chores.value.map(\.title) == ["sweep"] })
        chores.withLock { $0[0].done = true }
        #expect(await chores.waitUntil { !chores.hasPendingWrites })
        let stored = try await server.store.document(at: documentPath("chores/c1"))
        #expect(stored?.data == ["title": "sweep", "done": true, "note": "by the door"])
        await running.stop()
        await server.stop()
    }

    @Test("a handle whose path follows the user: signed out it is not available (loadError, no listener); once Ada signs in one listener attaches; signing out hides her elements and detaches it; Bob then sees only his")
    func followsTheUser() async throws {
        let now = AuthenticationTests.WallClock()
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        _ = try await server.store.commit([
            .set(documentPath("users/ada/chores/a1"), ["title": "ada's", "done": false]),
            .set(documentPath("users/bob/chores/b1"), ["title": "bob's", "done": false]),
        ])
        let provider = ClientSignInTests.Provider(tokens, now: now)
        provider.user.withLock { $0 = nil }
        let running = RunningClient(server, id: "device") { $0.tokenProvider = provider.provide }
        await running.client.waitUntilConnected()
        let chores = SyncedCollection(CollectionConfiguration<Chore>(collectionPath: { provider.user.withLock { $0 }.map { "users/\($0)/chores" } }),
                                      client: running.client)
        await chores.load()
        #expect((chores.loadError as? TandemError)?.code == .unavailable)
        chores.withLock { $0.append(Chore(title: "nobody's")) }
        #expect(chores.value.isEmpty && (chores.lastError as? TandemError)?.code == .unavailable)

        provider.user.withLock { $0 = "ada" }
        running.client.refreshToken()
        #expect(await chores.waitUntil { chores.value.map(\.title) == ["ada's"] && chores.loadError == nil })
        await server.waitForListeners(count: 1)

        provider.user.withLock { $0 = nil }
        running.client.refreshToken()
        #expect(await chores.waitUntil { chores.value.isEmpty }, "signed out, Ada's elements are not shown")
        await server.waitForListeners(count: 0)

        provider.user.withLock { $0 = "bob" }
        running.client.refreshToken()
        #expect(await chores.waitUntil { chores.value.map(\.title) == ["bob's"] })
        await server.waitForListeners(count: 1)
        chores.withLock { $0[0].done = true }
        #expect(await chores.waitUntil { !chores.hasPendingWrites })
        #expect(try await server.store.document(at: documentPath("users/bob/chores/b1"))?.data["done"] == true)
        #expect(try await server.store.document(at: documentPath("users/ada/chores/a1"))?.data["done"] == false)
        await running.stop()
        await server.stop()
    }

    @Test("two handles in two clients converge after concurrent inserts, edits and deletes, one offline in between; neither deletes what the other added")
    func twoClientsConverge() async throws {
        let server = try await LiveServer.start(store: MemoryServerStore(clock: ManualClock()))
        let ada = RunningClient(server, id: "ada-device")
        let bob = RunningClient(server, id: "bob-device")
        let configuration = CollectionConfiguration<Chore>(collectionPath: "chores", orderBy: ("title", true))
        let mine = SyncedCollection(configuration, client: ada.client)
        let theirs = SyncedCollection(configuration, client: bob.client)
        await mine.load()
        await theirs.load()

        mine.withLock { $0.append(Chore(title: "dishes")) }
        #expect(await theirs.waitUntil { theirs.value.map(\.title) == ["dishes"] })
        // Bob goes offline and edits; Ada adds and edits meanwhile.
        bob.client.setOnline(false)
        theirs.withLock {
            $0[0].done = true
            $0.append(Chore(title: "bins"))
        }
        mine.withLock {
            $0.append(Chore(title: "laundry"))
            $0[0].title = "dishes, all of them"
        }
        #expect(await mine.waitUntil { !mine.hasPendingWrites })
        bob.client.setOnline(true)
        let expected = [("bins", false), ("dishes, all of them", true), ("laundry", false)]
        for handle in [mine, theirs] {
            #expect(await handle.waitUntil { !handle.hasPendingWrites && handle.value.map { ($0.title, $0.done) }.elementsEqual(expected, by: ==) },
                    "\(handle.value.map { ($0.title, $0.done) })")
        }
        // A delete on one side is a delete on the other; nothing else goes.
        let bins = try #require(mine.value.first { $0.title == "bins" })
        mine.withLock { _ = $0.remove(id: bins.clientId) }
        #expect(await theirs.waitUntil { theirs.value.map(\.title) == ["dishes, all of them", "laundry"] })
        let stored = try await server.store.read(.collection(collectionPath("chores"), Query())).documents
        #expect(Set(stored.compactMap { $0.data["title"]?.stringValue }) == ["dishes, all of them", "laundry"])
        #expect(Set(stored.map(\.path.id)) == Set(mine.value.compactMap(\.documentId)))
        await ada.stop()
        await bob.stop()
        await server.stop()
    }
}
