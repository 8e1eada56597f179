import Foundation
import Synchronization
import Tandem
import TandemCore

/// An in-memory ``LocalDocumentPersistence`` for previews and tests.
///
/// ```swift
/// let persistence = MockLocalDocumentPersistence(document: UserModel.mocks[0], collectionPath: "users")
/// ```
public final class MockLocalDocumentPersistence: LocalDocumentPersistence {
    private let state: Mutex<LocalDocumentState?>
    /// How many times `save` ran.
    public var saveCount: Int { saves.load(ordering: .relaxed) }
    private let saves = Atomic<Int>(0)

    /// Starts empty, or holding `document` as the confirmed state of `collectionPath/id`.
    public init<T: SyncModel>(document: T? = nil, collectionPath: String = "mocks", clientID: String = "mock-client") {
        var initial: LocalDocumentState?
        if let document, let path = try? DocumentPath("\(collectionPath)/\(document.id)"),
           let data = try? JSONValueEncoder().encodeObject(document)
        {
            initial = LocalDocumentState(documentID: document.id, base: Document(path: path, data: data), outbox: Outbox(clientID: clientID))
        }
        state = Mutex(initial)
    }

    /// Starts empty.
    public init() {
        state = Mutex(nil)
    }

    public func load() throws -> LocalDocumentState? { state.withLock { $0 } }

    public func save(_ newState: LocalDocumentState) throws {
        saves.wrappingAdd(1, ordering: .relaxed)
        state.withLock { $0 = newState }
    }

    public func clear() throws { state.withLock { $0 = nil } }
}

/// An in-memory ``LocalCollectionPersistence`` for previews and tests.
///
/// ```swift
/// let persistence = MockLocalCollectionPersistence(collection: Product.mocks, collectionPath: "products")
/// ```
public final class MockLocalCollectionPersistence: LocalCollectionPersistence {
    private let state: Mutex<LocalCollectionState?>
    /// Every change applied, in order.
    public var appliedChanges: [LocalCollectionChange] { changes.withLock { $0 } }
    private let changes = Mutex<[LocalCollectionChange]>([])

    /// Starts holding `collection` as confirmed documents under `collectionPath` (nothing saved when empty).
    public init<T: SyncModel>(collection: [T] = [], collectionPath: String = "mocks", clientID: String = "mock-client") {
        let documents = collection.compactMap { model -> Document? in
            guard let path = try? DocumentPath("\(collectionPath)/\(model.id)"),
                  let data = try? JSONValueEncoder().encodeObject(model)
            else { return nil }
            return Document(path: path, data: data)
        }
        state = Mutex(collection.isEmpty ? nil : LocalCollectionState(documents: documents, outbox: Outbox(clientID: clientID)))
    }

    /// Starts empty.
    public init() {
        state = Mutex(nil)
    }

    public func load() throws -> LocalCollectionState? { state.withLock { $0 } }

    public func create(clientID: String) throws -> LocalCollectionState {
        let fresh = LocalCollectionState(outbox: Outbox(clientID: clientID))
        state.withLock { $0 = fresh }
        return fresh
    }

    /// Makes the next `count` calls to ``apply(_:)`` throw, writing nothing, as a full disk would.
    public func failNextApplies(_ count: Int) {
        failures.withLock { $0 = count }
    }

    private let failures = Mutex(0)

    public func apply(_ change: LocalCollectionChange) throws {
        let fail = failures.withLock { failures -> Bool in
            guard failures > 0 else { return false }
            failures -= 1
            return true
        }
        if fail { throw TandemError(.unavailable, "An injected failure: the mock persistence refused the write.") }
        changes.withLock { $0.append(change) }
        state.withLock { state in
            guard var current = state else { return }
            current.apply(change)
            state = current
        }
    }

    public func clear() throws { state.withLock { $0 = nil } }
}
