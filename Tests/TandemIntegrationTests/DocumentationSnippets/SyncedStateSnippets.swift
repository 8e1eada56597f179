import Foundation
import IdentifiedCollections
import Tandem
import TandemCore

/// The code of the synced-state article (`Sources/Tandem/Tandem.docc/SyncedState.md`): compiled,
/// not run.
enum SyncedStateSnippets {
    // snippet: synced-state-model
    struct Todo: DocumentIdentifiable {
        var clientId = UUID()      // the app's identity of the element; never stored
        var documentId: String?    // the document's id: nil until the element is first saved
        var memo: String
        var completed = false
    }
    // end snippet

    static func collection(client: TandemClient) async throws {
        // snippet: synced-state-collection
        let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)),
                                     client: client, persistence: try SQLiteCollectionPersistence(managerKey: "todos"))
        await todos.load()                                     // one listener; returns with the first state
        todos.withLock { $0.append(Todo(memo: "Buy milk")) }   // shown at once, with its documentId
        try await todos.save()                                 // the edit is in the outbox, on disk
        // end snippet
    }

    static func edits(todos: SyncedCollection<Todo>, milk: Todo, eggs: Todo) {
        // snippet: synced-state-edits
        todos.withLock { list in
            list.append(Todo(memo: "Buy bread"))   // new: a merge of its fields, at its new documentId
            list[id: milk.id]?.completed = true    // changed: a merge of `completed`, nothing else
            list.remove(id: eggs.id)               // removed: a delete of eggs' document
        }                                          // the three writes: one atomic batch
        // end snippet
    }

    // snippet: synced-state-settings
    struct Settings: DocumentIdentifiable {
        var clientId = UUID()
        var documentId: String?
        var darkMode = false
        var fontSize = 14
    }
    // end snippet

    static func document(client: TandemClient) async {
        // snippet: synced-state-document
        let settings = SyncedDocument(DocumentConfiguration<Settings>(collectionPath: "settings", documentId: "me"),
                                      default: Settings(), client: client)
        await settings.load()
        settings.withLock { $0.darkMode = true }   // the first edit creates settings/me; later ones merge what changed
        print(settings.exists, settings.value.fontSize)
        // end snippet
    }

    static func query(client: TandemClient) async {
        // snippet: synced-state-query
        let open = SyncedQuery<Todo>(collectionPath: "todos", client: client) { $0.whereField("completed", isEqualTo: false) }
        await open.load()
        print(open.value.map(\.memo))
        await open.load { $0.whereField("completed", isEqualTo: true).order(by: "memo") }   // one listener, now this query
        // end snippet
    }

    // snippet: synced-state-request
    struct UserTodos: KeyCollectionRequest {
        var userId: String
        var configuration: CollectionConfiguration<Todo> {
            CollectionConfiguration(collectionPath: "users/\(userId)/todos", orderBy: ("memo", true))
        }
    }
    // end snippet

    static func signedIn(client: TandemClient) {
        // snippet: synced-state-signed-in
        let mine = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: { client.authState.uid.map { "users/\($0)/todos" } }),
                                    client: client)
        let ada = SyncedCollection(UserTodos(userId: "ada"), client: client)
        // end snippet
        _ = (mine, ada)
    }

    static func previews(client: TandemClient) {
        // snippet: synced-state-testing
        var configuration = CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true))
        configuration.testingValue = [Todo(memo: "Buy milk")]
        SyncedStateContext.$current.withValue(.test) {
            let todos = SyncedCollection(configuration, client: client)   // shows the testing value
            todos.withLock { $0.append(Todo(memo: "Buy eggs")) }         // changes it; nothing is sent
        }
        // end snippet
    }
}
