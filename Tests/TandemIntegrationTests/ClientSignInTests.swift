import Foundation
import Synchronization
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// A `TandemClient` with a token provider, on a server with a secret: fresh tokens when the server
/// says one expired, and engines that follow who is signed in.
@Suite("Client sign-in", .timeLimit(.minutes(5)))
struct ClientSignInTests {
    let now = AuthenticationTests.WallClock()

    func server() async throws -> (LiveServer, BearerTokens) {
        try await AuthenticationTests.server(now: now)
    }

    /// A client with `provider` and a collection engine on `users/ada/notes`, keyed `key`.
    func signedIn(_ server: LiveServer, _ provider: Provider, key: String) -> (RunningClient, CollectionSyncEngine<Note>) {
        let running = RunningClient(server, id: key) { $0.tokenProvider = provider.provide }
        let notes = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("users/ada/notes")),
                                               managerKey: key, persistence: nil)
        return (running, notes)
    }

    /// Mints a 60-second token for whoever `user` names (nil: signed out), on the server's clock,
    /// and counts the calls.
    final class Provider: Sendable {
        let user = Mutex<String?>("ada")
        let calls = Mutex(0)
        let tokens: BearerTokens
        let now: AuthenticationTests.WallClock

        init(_ tokens: BearerTokens, now: AuthenticationTests.WallClock) {
            self.tokens = tokens
            self.now = now
        }

        var provide: TokenProvider {
            { [self] in
                calls.withLock { $0 += 1 }
                guard let user = user.withLock({ $0 }) else { return nil }
                return try tokens.mint(subject: user, lifetime: .seconds(60), now: now.withLock { $0 })
            }
        }
    }

    @Test("a token the server says expired is replaced by a fresh one from the provider; the write that met it applies once and the listener resumes")
    func refreshOnExpiry() async throws {
        let (server, tokens) = try await server()
        let provider = Provider(tokens, now: now)
        let (running, notes) = signedIn(server, provider, key: "refreshing")
        await notes.startListening()
        await server.waitForListeners(count: 1)
        #expect(running.client.authState == .signedIn(uid: "ada"))
        try await notes.saveDocument(Note(id: "1", text: "before"))
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(provider.calls.withLock { $0 } == 1)

        // The token expires; the next write meets the refusal, and the client reconnects with a
        // fresh token and sends it again.
        now.withLock { $0 += 61 }
        try await notes.updateDocument(id: "1", data: ["n": .increment(1)])
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(provider.calls.withLock { $0 } == 2)
        #expect(try await server.store.document(at: documentPath("users/ada/notes/1"))?.data["n"] == 1)
        #expect(running.client.authState == .signedIn(uid: "ada"))
        #expect(notes.rejectedWrites.isEmpty)

        // The listener is back: another client's write shows.
        let other = RunningClient(server, id: "other") { [now] in
            $0.token = try? tokens.mint(subject: "ada", now: now.withLock { $0 })
        }
        await other.client.waitUntilConnected()
        _ = try await other.client.commit([.set(documentPath("users/ada/notes/2"), ["id": "2", "text": "from elsewhere", "n": 0])])
        #expect(await notes.waitUntil { notes.getDocument(id: "2")?.text == "from elsewhere" })
        await server.waitForListeners(count: 1)
        await other.stop()
        await running.stop()
        await server.stop()
    }

    @Test("signing out detaches every engine's listener and holds their writes; signing in again attaches exactly one per engine and sends them")
    func signOutAndIn() async throws {
        let (server, tokens) = try await server()
        let provider = Provider(tokens, now: now)
        let (running, notes) = signedIn(server, provider, key: "switching")
        let profile = DocumentSyncEngine<Note>(remote: TandemRemoteDocumentService(client: running.client, collection: collectionPath("users/ada/profile")),
                                               managerKey: "profile", persistence: nil)
        await notes.startListening()
        try await profile.startListening(documentId: "me")
        await server.waitForListeners(count: 2)
        var states = running.client.authStates().makeAsyncIterator()
        #expect(await states.next() == .signedIn(uid: "ada"))

        for round in 1...2 {
            provider.user.withLock { $0 = nil }
            running.client.refreshToken()
            #expect(await states.next() == .signedOut)
            await server.waitForListeners(count: 0)
            // Written signed out: shown at once, held, not refused.
            try await notes.saveDocument(Note(id: "n\(round)", text: "written signed out"))
            #expect(notes.getDocument(id: "n\(round)")?.text == "written signed out" && notes.hasPendingWrites)

            provider.user.withLock { $0 = "ada" }
            running.client.refreshToken()
            #expect(await states.next() == .signedIn(uid: "ada"))
            await server.waitForListeners(count: 2)
            #expect(await notes.waitUntil { !notes.hasPendingWrites })
            #expect(try await server.store.document(at: documentPath("users/ada/notes/n\(round)")) != nil)
            // A round trip on the connection: every listen sent before it is registered by now.
            _ = try await running.client.document(at: documentPath("users/ada/profile/me"))
            #expect(server.listenerCount == 2)
        }
        #expect(notes.rejectedWrites.isEmpty)
        // Both engines still follow the server.
        try await profile.saveDocument(Note(id: "me", text: "signed in again"))
        #expect(await profile.waitUntil { !profile.hasPendingWrites })
        #expect(await profile.waitUntil { profile.currentDocument?.text == "signed in again" })
        await running.stop()
        await server.stop()
    }
}
