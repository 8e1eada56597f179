import Foundation
import IdentifiedCollections
import Observation
import Synchronization
import TandemCore
#if canImport(SwiftUI)
import SwiftUI
#endif

/// What a ``SyncedDocument`` holds: which document, and what it shows in tests.
public struct DocumentConfiguration<Value: DocumentIdentifiable>: Sendable {
    /// The document's collection, read again each time the handle attaches; nil while there is
    /// none (nobody signed in yet): the handle is then not available.
    public var collectionPath: @Sendable () -> String?
    /// The document's id within its collection.
    public var documentId: String
    /// The value shown by previews and tests, which make no connection.
    public var testingValue: Value?
    #if canImport(SwiftUI)
    /// Apple platforms: the animation a SwiftUI view shows the value's changes with (delivered on
    /// the main actor, as ``ChangeDelivery/automatic`` does there); nil for none.
    public var animation: Animation?
    #endif

    /// A configuration of document `documentId` in the collection at the fixed path
    /// `collectionPath`; `testingValue` is what previews and tests show.
    public init(collectionPath: String, documentId: String, testingValue: Value? = nil) {
        self.init(collectionPath: { collectionPath }, documentId: documentId, testingValue: testingValue)
    }

    /// A configuration of document `documentId` in a collection whose path follows the app's state:
    /// `collectionPath` is read again each time the handle attaches, and returns nil while there is
    /// none (nobody signed in). `testingValue` is what previews and tests show.
    public init(collectionPath: @escaping @Sendable () -> String?, documentId: String, testingValue: Value? = nil) {
        self.collectionPath = collectionPath
        self.documentId = documentId
        self.testingValue = testingValue
    }
}

/// One document held as plain state, with a default value while it does not exist: edit `value`
/// with ``withLock(_:)``, and the edit becomes a write through a document engine's durable outbox.
///
/// ```swift
/// let settings = SyncedDocument(DocumentConfiguration<Settings>(collectionPath: "settings", documentId: "me"),
///                               default: Settings(), client: client)
/// await settings.load()
/// settings.withLock { $0.darkMode = true }   // merges `darkMode` alone
/// ```
///
/// The first edit of a document that does not exist yet creates it with the value's fields (merged,
/// so fields written meanwhile elsewhere stay); later edits merge exactly the field paths they
/// changed. As with ``SyncedCollection``, edits are queued in order, durable, sent exactly once; a
/// refused one is rolled back and `lastError` says why.
public final class SyncedDocument<Value: DocumentIdentifiable>: SyncedEditingHandle<Value>, @unchecked Sendable {
    /// The configuration the handle was made with.
    public let configuration: DocumentConfiguration<Value>
    /// The engine underneath.
    let engine: DocumentSyncEngine<SyncedRow>
    /// The value while the document does not exist: the default, as this document.
    private let fallback: Value
    /// What this handle shares with others of its configuration: held, so the registry keeps it.
    private let shared: any AnyObject & Sendable

    /// - Parameters:
    ///   - configuration: the document, and its testing value.
    ///   - defaultValue: the value while the document does not exist (its `documentId` is the
    ///     configuration's).
    ///   - remote: the server side (``TandemRemoteDocumentService`` or a mock).
    ///   - persistence: where the cached document and the outbox are kept (nil: memory only).
    ///   - managerKey: names the engine's saved state and analytics events. Default: from the
    ///     document's path.
    ///   - logger: receives `{managerKey}_{event}` analytics events.
    ///   - changeDelivery: where observers hear of changes (``ChangeDelivery``).
    public init(_ configuration: DocumentConfiguration<Value>, default defaultValue: Value, remote: any RemoteDocumentService,
                persistence: (any LocalDocumentPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil,
                changeDelivery: ChangeDelivery = .automatic) {
        self.configuration = configuration
        var fallback = defaultValue
        fallback.documentId = configuration.documentId
        self.fallback = fallback
        let path = configuration.collectionPath()
        let id = configuration.documentId
        let shared = SyncedRegistry.shared.shared(SyncedRegistry.key(remote: remote, kind: "document:\(id)", value: Value.self, path: path, query: nil)) {
            let key = managerKey ?? "synced-\(path ?? "none")-\(id)"
            let engine = DocumentSyncEngine<SyncedRow>(remote: remote, managerKey: key, persistence: persistence, logger: logger, changeDelivery: .immediate)
            // The document, when it comes, is the default's element: one identity throughout.
            var testing = configuration.testingValue
            testing?.documentId = id
            let store = SyncedStore<Value>(core: engine.core, collectionPath: { try remote.collectionPath() }, order: nil,
                                           clientIds: [id: testing?.clientId ?? fallback.clientId], testingValue: testing.map { [$0] })
            // Weakly: the store keeps this closure, and must not keep its engine alive.
            store.follow(remote) { [weak engine] in
                do {
                    try await engine?.startListening(documentId: id)
                    return nil
                } catch {
                    return error
                }
            }
            return SyncedShared(engine: engine, store: store)
        }
        engine = shared.engine
        self.shared = shared
        super.init(store: shared.store, changeDelivery: changeDelivery, animation: configuration.synced)
    }

    /// A handle on a ``TandemClient``'s server.
    public convenience init(_ configuration: DocumentConfiguration<Value>, default defaultValue: Value, client: TandemClient,
                            persistence: (any LocalDocumentPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil) {
        self.init(configuration, default: defaultValue, remote: TandemRemoteDocumentService(client: client, collectionPath: configuration.collectionPath),
                  persistence: persistence, managerKey: managerKey, logger: logger)
    }

    /// A handle for a reusable request (``KeyDocumentRequest``).
    public convenience init<Request: KeyDocumentRequest>(_ request: Request, default defaultValue: Value, client: TandemClient,
                                                         persistence: (any LocalDocumentPersistence)? = nil) where Request.Value == Value {
        self.init(request.configuration, default: defaultValue, client: client, persistence: persistence)
    }

    override func valueDidChange() {
        registrar.withMutation(of: self, keyPath: \.value) {}
    }

    // MARK: State

    /// The document with every pending edit applied, or the default value while it does not exist.
    public var value: Value {
        registrar.access(self, keyPath: \.value)
        return store.value.first ?? fallback
    }

    /// Whether the document exists (on the server, or by an edit on its way there).
    public var exists: Bool {
        registrar.access(self, keyPath: \.value)
        return !store.value.isEmpty
    }

    // MARK: Loading and editing

    /// Edits the value; the changed field paths become one write (a create while the document does
    /// not exist, once the closure changed the default). Do not read or edit this handle inside
    /// the closure.
    @discardableResult
    public func withLock<Result>(_ edit: (inout Value) throws -> Result) rethrows -> Result {
        let fallback = self.fallback
        return try store.edit { elements in
            var document = elements.first ?? fallback
            let result = try edit(&document)
            // The identity is the handle's, whatever the closure did with it.
            document.documentId = fallback.documentId
            document.clientId = elements.first?.clientId ?? fallback.clientId
            // A read, or an edit that left the default as it was, creates nothing: the document
            // may exist on the server and not be loaded yet, and the default's fields would
            // overwrite it.
            if elements.isEmpty && document == fallback { return result }
            elements = IdentifiedArray(uniqueElements: [document])
            return result
        }
    }

    /// Deletes the document; the value goes back to the default.
    public func delete() {
        store.edit { $0 = [] }
    }
}
