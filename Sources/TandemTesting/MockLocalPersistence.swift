import Foundation
import Synchronization
import Tandem
import TandemCore

/// An in-memory `LocalDocumentPersistence` for previews and tests.
///
/// ```swift
/// let persistence = MockLocalDocumentPersistence(document: UserModel.mocks[0], collectionPath: "users")
/// ```
public final class MockLocalDocumentPersistence: LocalDocumentPersistence {
    private let state: Mutex<LocalDocumentState?>
    /// How many times `save` ran.
    public var saveCount: Int { saves.load(ordering: .relaxed) }
    private let saves = Atomic<Int>(0)

    /// Starts holding `document` as the confirmed state of `collectionPath/id`. The collection path
    /// must be the engine's remote's: a document cached under another path is not the one it reads.
    /// Throws when the path or the document is not valid. `clientID` is the outbox's writer id; by
    /// default each mock gets one of its own.
    public init<T: SyncModel>(document: T, collectionPath: String, clientID: String? = nil) throws {
        let path = try CollectionPath(collectionPath).document(document.id)
        let data = try JSONValueEncoder().encodeObject(document)
        state = Mutex(LocalDocumentState(documentID: document.id, base: Document(path: path, data: data), outbox: Outbox(clientID: clientID ?? Self.newWriterID())))
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

    private let spaces = MockSpaces<MockLocalDocumentPersistence> { MockLocalDocumentPersistence() }

    /// Each user's space, empty at first and kept for the life of this mock.
    public func space(for user: String) throws -> any LocalDocumentPersistence { spaces.space(for: user) }
    public func lastUser() throws -> String? { spaces.lastUser }
    public func setLastUser(_ user: String?) throws { spaces.lastUser = user }

    /// A writer id of its own for each mock seeded with documents: two mocks on one server never
    /// share one, so neither's writes are taken for the other's.
    static func newWriterID() -> String {
        "mock-\(UUID().uuidString.lowercased())"
    }
}

/// An in-memory `LocalCollectionPersistence` for previews and tests.
///
/// ```swift
/// let persistence = MockLocalCollectionPersistence(collection: Product.mocks, collectionPath: "products")
/// ```
public final class MockLocalCollectionPersistence: LocalCollectionPersistence {
    private let state: Mutex<LocalCollectionState?>
    /// Every change applied, in order.
    public var appliedChanges: [LocalCollectionChange] { changes.withLock { $0 } }
    private let changes = Mutex<[LocalCollectionChange]>([])

    /// Starts holding `collection` as confirmed documents under `collectionPath` (nothing saved when
    /// empty). The collection path must be the engine's remote's: documents cached under another
    /// path are not the ones it reads. Throws when a path or a model is not valid. `clientID` is the
    /// outbox's writer id; by default each mock gets one of its own.
    public init<T: SyncModel>(collection: [T], collectionPath: String, clientID: String? = nil) throws {
        let collectionPath = try CollectionPath(collectionPath)
        let documents = try collection.map { model in
            Document(path: try collectionPath.document(model.id), data: try JSONValueEncoder().encodeObject(model))
        }
        state = Mutex(collection.isEmpty ? nil : LocalCollectionState(documents: documents, outbox: Outbox(clientID: clientID ?? MockLocalDocumentPersistence.newWriterID())))
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

    /// Runs `observer` at the start of every ``apply(_:)``, on the applying thread: a test can see
    /// what holds while the engine writes to disk.
    public func whenApplying(_ observer: @escaping @Sendable (LocalCollectionChange) -> Void) {
        applying.withLock { $0 = Observer(call: observer) }
    }

    private final class Observer: Sendable {
        let call: @Sendable (LocalCollectionChange) -> Void
        init(call: @escaping @Sendable (LocalCollectionChange) -> Void) { self.call = call }
    }

    private let applying = Mutex<Observer?>(nil)

    public func apply(_ change: LocalCollectionChange) throws {
        applying.withLock { $0 }?.call(change)
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

    private let spaces = MockSpaces<MockLocalCollectionPersistence> { MockLocalCollectionPersistence() }

    /// Each user's space, empty at first and kept for the life of this mock.
    public func space(for user: String) throws -> any LocalCollectionPersistence { spaces.space(for: user) }
    public func lastUser() throws -> String? { spaces.lastUser }
    public func setLastUser(_ user: String?) throws { spaces.lastUser = user }
}

/// The users' spaces of a mock persistence, made empty on first use and kept for its life, and
/// whose space was shown last.
final class MockSpaces<Persistence: Sendable>: Sendable {
    private let make: @Sendable () -> Persistence
    private let state = Mutex<(spaces: [String: Persistence], lastUser: String?)>(([:], nil))

    init(_ make: @escaping @Sendable () -> Persistence) {
        self.make = make
    }

    func space(for user: String) -> Persistence {
        state.withLock { state in
            if let space = state.spaces[user] { return space }
            let space = make()
            state.spaces[user] = space
            return space
        }
    }

    var lastUser: String? {
        get { state.withLock { $0.lastUser } }
        set { state.withLock { $0.lastUser = newValue } }
    }
}
