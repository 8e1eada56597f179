import Foundation
import IdentifiedCollections
import Tandem
import TandemCore

/// The code of the article "Migrating from SharingFirestore" (MigratingFromSharingFirestore.md).
enum MigratingFromSharingFirestoreSnippets {
    // snippet: sharing-models
    struct Todo: DocumentIdentifiable {
        var clientId = UUID()          // the element's identity in the app; never stored
        var documentId: String?        // the document's id; nil until first saved
        var memo: String
        var completed = false
    }

    struct UserSettings: DocumentIdentifiable {
        var clientId = UUID()
        var documentId: String?
        var darkMode = false
        var notificationsEnabled = true
    }
    // end snippet

    static func todos(client: TandemClient) async throws {
        // snippet: sharing-after
        let todos = SyncedCollection(
            CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)),
            client: client,
            persistence: try SQLiteCollectionPersistence(managerKey: "todos")
        )
        await todos.load()

        todos.withLock { $0.insert(Todo(memo: "New task"), at: 0) }      // creates one document
        let task = todos.value[0]
        todos.withLock { $0[id: task.id]?.completed.toggle() }           // writes `completed` alone
        todos.withLock { _ = $0.remove(id: task.id) }                    // deletes that document
        // end snippet
    }

    static func settings(client: TandemClient) async {
        // snippet: sharing-document
        let settings = SyncedDocument(
            DocumentConfiguration<UserSettings>(collectionPath: "settings", documentId: "user-preferences"),
            default: UserSettings(),
            client: client
        )
        await settings.load()
        settings.withLock {
            $0.darkMode = true
            $0.notificationsEnabled = false
        }
        // end snippet
    }

    // snippet: sharing-request
    struct UserTodos: KeyCollectionRequest {
        let userId: String

        var configuration: CollectionConfiguration<Todo> {
            .init(collectionPath: "users/\(userId)/todos", orderBy: ("memo", true))
        }
    }
    // end snippet

    static func request(client: TandemClient, currentUserId: String) async {
        // snippet: sharing-request-use
        let userTodos = SyncedCollection(UserTodos(userId: currentUserId), client: client)
        await userTodos.load()
        // end snippet
    }

    static func open(client: TandemClient) async {
        // snippet: sharing-query
        let open = SyncedQuery<Todo>(collectionPath: "todos", client: client) {
            $0.whereField("completed", isEqualTo: false).order(by: "memo")
        }
        await open.load()
        // end snippet
    }

    static func preview(client: TandemClient) {
        // snippet: sharing-testing
        SyncedStateContext.$current.withValue(.test) {
            let todos = SyncedCollection(
                CollectionConfiguration<Todo>(collectionPath: "todos", testingValue: [Todo(memo: "Test todo")]),
                client: client
            )
            todos.withLock { $0.append(Todo(memo: "Another")) }          // changes the value; writes nothing
        }
        // end snippet
    }
}
