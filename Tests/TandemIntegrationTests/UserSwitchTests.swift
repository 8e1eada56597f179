import Foundation
import Synchronization
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// One engine, several users on one device, on a live server with real SQLite caches: each user
/// sees their own space (cache, outbox and writer id, resume point), and no write is ever sent as
/// someone else.
@Suite("User switch", .timeLimit(.minutes(5)))
struct UserSwitchTests {
    let now = AuthenticationTests.WallClock()

    /// Waits until the client's auth state is `expected`.
    func signedIn(_ client: TandemClient, as expected: AuthState) async {
        for await state in client.authStates() where state == expected { return }
    }

    @Test("Ada, then Bob, then Ada on one engine: Bob sees only his documents, his older ones included, and his writes land; Ada's write queued offline is never sent as Bob, and lands when she is back")
    func adaThenBob() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        _ = try await server.store.commit([.set(documentPath("users/bob/notes/old"), ["id": "old", "text": "bob's older note", "n": 0])])
        let provider = ClientSignInTests.Provider(tokens, now: now)
        let directory = TemporaryDirectory()
        let running = RunningClient(server, id: "device") {
            $0.tokenProvider = provider.provide
            $0.storageDirectory = directory.url
        }
        let remote = TandemRemoteCollectionService(client: running.client, collectionPath: { provider.user.withLock { $0 }.map { "users/\($0)/notes" } })
        let notes = CollectionSyncEngine<Note>(remote: remote, managerKey: "notes", persistence: try SQLiteCollectionPersistence(managerKey: "notes", directory: directory.url))
        let profileRemote = TandemRemoteDocumentService(client: running.client, collectionPath: { provider.user.withLock { $0 }.map { "users/\($0)/profile" } })
        let profile = DocumentSyncEngine<Note>(remote: profileRemote, managerKey: "profile", persistence: FileDocumentPersistence(managerKey: "profile", directory: directory.url))
        await notes.startListening()
        try await profile.startListening(documentId: "me")
        await server.waitForListeners(count: 2)
        try await notes.saveDocument(Note(id: "a1", text: "ada's"))
        try await profile.saveDocument(Note(id: "me", text: "Ada"))
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(await profile.waitUntil { !profile.hasPendingWrites })

        // Offline, Ada writes once more; then Bob signs in on the device.
        running.client.setOnline(false)
        try await notes.saveDocument(Note(id: "a2", text: "ada's, offline"))
        #expect(notes.hasPendingWrites)
        provider.user.withLock { $0 = "bob" }
        running.client.setOnline(true)
        await signedIn(running.client, as: .signedIn(uid: "bob"))
        #expect(await notes.waitUntil { notes.currentCollection.map(\.id) == ["old"] }, "\(notes.currentCollection)")
        #expect(!notes.hasPendingWrites && notes.rejectedWrites.isEmpty, "Ada's queued write stays hers")
        #expect(await profile.waitUntil { profile.currentDocument == nil && !profile.isFromCache }, "Bob has no profile yet: \(String(describing: profile.currentDocument))")
        try await notes.saveDocument(Note(id: "b1", text: "bob's"))
        try await profile.saveDocument(Note(id: "me", text: "Bob"))
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(await profile.waitUntil { !profile.hasPendingWrites })
        #expect(notes.rejectedWrites.isEmpty && profile.rejectedWrites.isEmpty, "\(notes.rejectedWrites) \(profile.rejectedWrites)")
        #expect(try await server.store.document(at: documentPath("users/bob/notes/b1"))?.data["text"] == "bob's")
        #expect(try await server.store.document(at: documentPath("users/bob/profile/me"))?.data["text"] == "Bob")
        #expect(try await server.store.document(at: documentPath("users/ada/notes/a2")) == nil, "never sent as Bob")
        #expect(Set(notes.currentCollection.map(\.id)) == ["old", "b1"])

        // A new engine with the same key shows the space shown last: Bob's, never Ada's cache. It
        // takes the cache over: the first one writes nothing more to it.
        let relaunched = CollectionSyncEngine<Note>(remote: remote, managerKey: "notes", persistence: try SQLiteCollectionPersistence(managerKey: "notes", directory: directory.url))
        #expect(Set(relaunched.currentCollection.map(\.id)) == ["old", "b1"] && !relaunched.hasPendingWrites)
        await #expect(throws: TandemError.self) { try await notes.saveDocument(Note(id: "b2", text: "to the engine taken over")) }
        await relaunched.startListening()

        // Ada again: her space as she left it, and her queued write goes, as her.
        provider.user.withLock { $0 = "ada" }
        running.client.refreshToken()
        await signedIn(running.client, as: .signedIn(uid: "ada"))
        #expect(await relaunched.waitUntil { Set(relaunched.currentCollection.map(\.id)) == ["a1", "a2"] && !relaunched.hasPendingWrites }, "\(relaunched.currentCollection)")
        #expect(try await server.store.document(at: documentPath("users/ada/notes/a2"))?.data["text"] == "ada's, offline")
        #expect(await profile.waitUntil { profile.currentDocument?.text == "Ada" })
        #expect(relaunched.rejectedWrites.isEmpty)
        await running.stop()
        await server.stop()
    }

    @Test("signed out, then Ada: what was written signed out is not sent as Ada; Ada's writes land, none refused")
    func signedOutThenAda() async throws {
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let provider = ClientSignInTests.Provider(tokens, now: now)
        provider.user.withLock { $0 = nil }
        let running = RunningClient(server, id: "device") { $0.tokenProvider = provider.provide }
        let notes = CollectionSyncEngine<Note>(remote: TandemRemoteCollectionService(client: running.client, collection: collectionPath("users/ada/notes")),
                                               managerKey: "anonymous-first", persistence: MockLocalCollectionPersistence())
        await running.client.waitUntilConnected()
        try await notes.saveDocument(Note(id: "before", text: "written signed out"))
        #expect(notes.hasPendingWrites)
        provider.user.withLock { $0 = "ada" }
        running.client.refreshToken()
        await signedIn(running.client, as: .signedIn(uid: "ada"))
        await notes.startListening()
        try await notes.saveDocument(Note(id: "mine", text: "Ada's"))
        #expect(await notes.waitUntil { !notes.hasPendingWrites })
        #expect(notes.rejectedWrites.isEmpty, "\(notes.rejectedWrites)")
        #expect(try await server.store.document(at: documentPath("users/ada/notes/mine")) != nil)
        #expect(try await server.store.document(at: documentPath("users/ada/notes/before")) == nil, "not sent as Ada")
        await running.stop()
        await server.stop()
    }
}
