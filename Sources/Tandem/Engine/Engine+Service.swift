import ServiceLifecycle
import TandemCore

// Engines as services: in a `ServiceGroup` beside the `TandemClient`, or in a SwiftUI `.task`, an
// engine listens for as long as its task runs, and stops (keeping its cache) when the task is
// cancelled or the group shuts down. Writes are made through the engine meanwhile, as always.

extension CollectionSyncEngine: Service {
    /// Listens to the query last given to `startListening` (every document before one was given)
    /// until the task is cancelled or the service group shuts down; then stops listening and keeps
    /// the cache.
    ///
    /// ```swift
    /// let group = ServiceGroup(services: [client, todos], logger: logger)
    /// try await group.run()
    /// ```
    public func run() async throws {
        let query = core.query ?? Query()
        await startListening { _ in query }
        await untilShutdown()
        stopListening(clearCaches: false)
    }
}

extension CollectionGroupSyncEngine: Service {
    /// Listens to the query last given to `startListening` until the task is cancelled or the
    /// service group shuts down; then stops listening and keeps the cache.
    public func run() async throws {
        let query = core.query ?? Query()
        await startListening { _ in query }
        await untilShutdown()
        stopListening(clearCaches: false)
    }
}

extension DocumentSyncEngine: Service {
    /// Listens to the document last given to `startListening(documentId:)` (the saved one after a
    /// relaunch; none before any) until the task is cancelled or the service group shuts down; then
    /// stops listening and keeps the cache.
    public func run() async throws {
        if let id = core.documentID {
            do {
                try await startListening(documentId: id)
            } catch {
                // No path now (signed out, say): the service waits on rather than stop its group.
                core.log("listener_fail", ["error_description": "\(error)"], severity: .severe)
            }
        }
        await untilShutdown()
        stopListening(clearCaches: false)
    }
}

/// Returns when the task is cancelled or its service group begins a graceful shutdown.
func untilShutdown() async {
    await cancelWhenGracefulShutdown {
        // A stream nothing is ever sent on: iterating it ends only when the task is cancelled.
        let (never, keep) = AsyncStream<Never>.makeStream()
        for await _ in never {}
        withExtendedLifetime(keep) {}
    }
}
