import Synchronization
import TandemCore

/// Handles with equal configurations share one engine and one store, for as long as one of them
/// lives: two views holding "the todos ordered by memo" see one value, edit one outbox, and run one
/// listener. Everything that changes a handle's results is in its key (the remote, the kind of
/// handle, the value's type, the path, the query and order, the context); any difference keeps
/// handles apart. The first handle's persistence and logger serve them all.
final class SyncedRegistry: Sendable {
    static let shared = SyncedRegistry()

    struct Key: Hashable, Sendable {
        let remote: ObjectIdentifier
        let kind: String
        let value: ObjectIdentifier
        let path: String
        let query: String
        let context: SyncedStateContext
    }

    private final class Entry: @unchecked Sendable {
        // Read and written under the registry's lock only.
        weak var object: AnyObject?
        init(_ object: AnyObject) { self.object = object }
    }

    private let entries = Mutex<[Key: Entry]>([:])

    /// The object shared under `key`, made with `make` when none lives; a nil key shares nothing.
    func shared<Object: AnyObject & Sendable>(_ key: Key?, make: () -> Object) -> Object {
        guard let key else { return make() }
        return entries.withLock { entries in
            if let object = entries[key]?.object as? Object { return object }
            let made = make()
            entries = entries.filter { $0.value.object != nil }
            entries[key] = Entry(made)
            return made
        }
    }

    /// What identifies a remote for sharing: its client, or the remote itself when it is an
    /// object; nil (nothing shared) otherwise.
    static func identity(of remote: Any) -> ObjectIdentifier? {
        if let tandem = remote as? TandemRemoteCollectionService { return ObjectIdentifier(tandem.client) }
        if let tandem = remote as? TandemRemoteDocumentService { return ObjectIdentifier(tandem.collection.client) }
        if type(of: remote) is AnyClass { return ObjectIdentifier(remote as AnyObject) }
        return nil
    }

    static func key<Value>(remote: Any, kind: String, value: Value.Type, path: String?, query: Query?) -> Key? {
        guard let remote = identity(of: remote), let path else { return nil }
        return Key(remote: remote, kind: kind, value: ObjectIdentifier(value), path: path,
                   query: query.map { SyncCore<SyncedRow>.digest(of: $0) } ?? "", context: SyncedStateContext.current)
    }
}

/// An engine and its store, shared by the handles of one key.
final class SyncedShared<Engine: AnyObject & Sendable, Value: DocumentIdentifiable>: Sendable {
    let engine: Engine
    let store: SyncedStore<Value>

    init(engine: Engine, store: SyncedStore<Value>) {
        self.engine = engine
        self.store = store
    }
}
