import Foundation
import Observation
import Synchronization
import TandemCore

/// What the three synced handles share: the store that holds their value over an engine, the way
/// observers hear of its changes, and loading. An app uses ``SyncedCollection``, ``SyncedDocument``
/// or ``SyncedQuery``; it never makes or subclasses this one.
public class SyncedHandle<Value: DocumentIdentifiable>: Observable, @unchecked Sendable {
    // Safe to mark unchecked: every stored property, here and in the final subclasses, is a
    // constant of a Sendable type (the registrar is one, `listener` a lock); a non-final class
    // cannot say so checked.
    let store: SyncedStore<Value>
    let registrar = ObservationRegistrar()
    private let listener = Mutex<Int?>(nil)

    /// Follows `store`: observers hear of each change where `changeDelivery` says, inside
    /// `animation` where one is configured.
    init(store: SyncedStore<Value>, changeDelivery: ChangeDelivery, animation: SyncedAnimation) {
        self.store = store
        let token = store.addListener { [weak self] changes in
            changeDelivery.deliver { [weak self] in
                guard let self else { return }
                animation.perform(changes) { [self] in self.tell(changes) }
            }
        }
        listener.withLock { $0 = token }
    }

    deinit {
        if let token = listener.withLock({ $0 }) { store.removeListener(token) }
    }

    /// Tells observers of each property the change touched; each handle adds its own.
    func tell(_ changes: SyncedChanges) {
        if changes.contains(.value) { valueDidChange() }
        if changes.contains(.loadError) { registrar.withMutation(of: self, keyPath: \.loadError) {} }
        if changes.contains(.isLoading) { registrar.withMutation(of: self, keyPath: \.isLoading) {} }
    }

    /// Tells observers of the handle's `value` that it changed: each handle says which property
    /// that is (its type differs).
    func valueDidChange() {}

    /// Whether `load()` is waiting for the first state.
    public var isLoading: Bool {
        registrar.access(self, keyPath: \.isLoading)
        return store.isLoading
    }

    /// Why the handle could not be loaded (no path: nobody signed in), if it could not.
    public var loadError: (any Error)? {
        registrar.access(self, keyPath: \.loadError)
        return store.loadError
    }

    /// Attaches the handle's listener (one, however often it is called) and returns once the first
    /// state is in, or at once with the cache when the server cannot be reached. Not available (no
    /// path): `loadError` says why, and no listener runs.
    public func load() async {
        await store.load()
    }

    /// A signal after each change of the handle's state, for tests that await one.
    package func changeSignals() -> AsyncStream<Void> { store.changeSignals() }
}

/// What the two handles an app edits share beside ``SyncedHandle``: whether edits wait for the
/// server, the last that failed, and waiting until they are durable. An app uses
/// ``SyncedCollection`` or ``SyncedDocument``; it never makes or subclasses this one.
public class SyncedEditingHandle<Value: DocumentIdentifiable>: SyncedHandle<Value>, @unchecked Sendable {
    override func tell(_ changes: SyncedChanges) {
        super.tell(changes)
        if changes.contains(.hasPendingWrites) { registrar.withMutation(of: self, keyPath: \.hasPendingWrites) {} }
        if changes.contains(.lastError) { registrar.withMutation(of: self, keyPath: \.lastError) {} }
    }

    /// Whether an edit is not yet acknowledged by the server.
    public var hasPendingWrites: Bool {
        registrar.access(self, keyPath: \.hasPendingWrites)
        return store.hasPendingWrites
    }

    /// The last edit that failed for good: refused by the server (it was rolled back), or refused
    /// at once (no collection, nobody signed in, an invalid value, a path the server would refuse).
    public var lastError: (any Error)? {
        registrar.access(self, keyPath: \.lastError)
        return store.lastError
    }

    /// Returns once every edit made so far is in the engine's outbox, durable (not once the server
    /// answered it). Throws the error of one that could not be stored.
    public func save() async throws {
        try await store.save()
    }
}
