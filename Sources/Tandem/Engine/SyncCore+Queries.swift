import Foundation
import TandemCore

extension SyncCore {
    /// Listens to a query: the same query again goes on with its listener (one waiting out a
    /// backoff starts again at once, resuming); a new query replaces the listener and starts from
    /// a snapshot, since a resume version belongs to the query that reached it. The first query of
    /// an engine resumes from the saved version when it is the query that reached it (a relaunch).
    ///
    /// Decided and started in one step on `queue`: two calls at once with one query attach one
    /// listener, and both return once it has its first batch.
    func listen(to query: Query, _ listen: @escaping @Sendable (Query, Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>) async {
        let digest = Self.digest(of: query)
        let source = ListenSource { resumeFrom in listen(query, resumeFrom) }
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            queue.enqueue { [self] in
                var reshown = false
                var fresh = false
                let effects = state.access { state -> ListenerEffects in
                    guard !state.tasks.isShutDown else { return ListenerEffects(resume: [started]) }
                    let same = state.query == query || (state.query == nil && state.resumeQuery == digest)
                    fresh = !(same && state.listener.isUp)
                    if state.query != query {
                        // The view shows the new query's answer over the cache at once.
                        reshown = Self.setQueryView(query, in: &state)
                    }
                    state.query = query
                    state.queryDigest = digest
                    state.resumeQuery = nil
                    state.tasks.source = source
                    state.tasks.starts.append(started)
                    return Self.take(same ? state.listener.start() : state.listener.restart(), in: &state)
                }
                if reshown { notifyChanged([.documents]) }
                if fresh { log("bulkLoad_start", ["filter_count": query.filterCount]) }
                perform(effects)
            }
        }
        triggerFlush()
    }

    /// A digest of a query, saved with the resume version its listener reached.
    static func digest(of query: Query) -> String {
        var digest = StableDigest()
        digest.string(JSONText.encode(query.wireValue))
        return String(digest.value, radix: 16)
    }

    /// Stops the listener; with `clearCaches` the cached documents go from memory and disk. One
    /// step on `queue`: after each call made before it (a start still queued included), before any
    /// made after it.
    func stopListening(clearCaches: Bool) {
        queue.enqueue { [self] in
            stopListenerNow()
            state.access { state in
                // The same query again resumes where this one stopped, while the cache is kept.
                state.resumeQuery = clearCaches ? nil : state.queryDigest
                state.query = nil
            }
            log("listener_stopped")
            if clearCaches {
                clearDocumentsOnQueue()
                log("cachesCleared")
            }
        }
    }

    /// A document engine's stop (``stopListening(clearCaches:)``); with `clearCaches` the cached
    /// document and its id go too.
    func stopFollowing(clearCaches: Bool) {
        queue.enqueue { [self] in
            stopListenerNow()
            log("listener_stopped")
            if clearCaches {
                clearDocumentsOnQueue(forgetDocumentID: true)
                log("cachesCleared")
            }
        }
    }

    /// The query the listener follows, if any.
    var query: Query? { state.current.query }

    /// Runs a query on the server once, with its analytics events.
    func fetch(_ query: Query, _ fetch: (Query) async throws -> [Document]) async throws -> [T] {
        retryNowIfDown()
        log("getDocumentsQuery_start", ["filter_count": query.filterCount])
        do {
            let models = try await fetch(query).compactMap(decode)
            log("getDocumentsQuery_success", ["count": models.count, "filter_count": query.filterCount])
            return models
        } catch {
            log("getDocumentsQuery_fail", ["error_description": "\(error)", "filter_count": query.filterCount], severity: .severe)
            throw error
        }
    }
}

extension SyncCore {
    /// A new client id for an engine's outbox.
    static func newClientID(_ managerKey: String) -> String {
        "\(UUID().uuidString.lowercased())/\(managerKey)"
    }

    /// Fetches one document from the server once, with its analytics events.
    func fetchDocument(id: String, _ fetch: (String) async throws -> Document?) async throws -> T? {
        log("getDocument_start", ["document_id": id])
        do {
            let document = try await fetch(id)
            log("getDocument_success", ["document_id": id])
            return document.flatMap(decode)
        } catch {
            log("getDocument_fail", ["document_id": id, "error_description": "\(error)"], severity: .severe)
            throw error
        }
    }
}

extension SyncCore {
    /// A cache loaded from another collection than the remote's (a mock persistence seeded under
    /// one path, a remote pointed at another): its documents would show but never be found by id,
    /// written or refreshed. Said loudly, as `persistence_mismatch`, rather than left to puzzle over.
    func checkCachedCollection(_ parents: some Sequence<CollectionPath>, against remote: CollectionPath?) {
        guard let remote, let other = parents.first(where: { $0 != remote }) else { return }
        log("persistence_mismatch", [
            "error_description": "The cache holds documents of \(other), but the remote's collection is \(remote). Give the remote and the persistence the same collection path (the mocks' collectionPath:).",
        ], severity: .severe)
    }
}

extension Query {
    /// How many filters the query has, for analytics: a composite filter (an `or` or an `and`)
    /// counts as one, as Firestore's `whereFilter` does.
    var filterCount: Int {
        operations.filter {
            switch $0 {
            case .filter, .compositeFilter: return true
            case .order, .limit, .limitToLast, .cursor: return false
            }
        }.count
    }
}
