import TandemCore

extension SyncCore {
    /// Listens to a query: the same query again (while live) does nothing; a new one replaces the
    /// listener and starts from a snapshot, since a resume version belongs to the query that reached it.
    func listen(to query: Query, _ listen: @escaping @Sendable (Query, Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error>) async {
        let unchanged = state.withLock { state -> Bool in
            if state.query == query && state.listener != nil { return true }
            state.query = query
            state.resumeVersion = nil
            return false
        }
        if unchanged { return }
        log("bulkLoad_start", ["filter_count": query.filterCount])
        await startListener { resumeFrom in listen(query, resumeFrom) }
        triggerFlush()
    }

    /// Stops the listener; with `clearCaches` the cached documents go from memory and disk.
    func stopListening(clearCaches: Bool) {
        stopListener()
        state.withLock { $0.query = nil }
        log("listener_stopped")
        if clearCaches {
            clearDocuments()
            log("cachesCleared")
        }
    }

    /// The query the listener follows, if any.
    var query: Query? { state.withLock { $0.query } }

    /// Runs a query on the server once, with its analytics events.
    func fetch(_ query: Query, _ fetch: (Query) async throws -> [Document]) async throws -> [T] {
        retryNowIfDown()
        log("getDocumentsQuery_start", ["filter_count": query.filterCount])
        do {
            let models = try await fetch(query).compactMap(Self.decode)
            log("getDocumentsQuery_success", ["count": models.count, "filter_count": query.filterCount])
            return models
        } catch {
            log("getDocumentsQuery_fail", ["error_description": "\(error)", "filter_count": query.filterCount], severity: .severe)
            throw error
        }
    }
}

extension Query {
    /// How many filters the query has, for analytics.
    var filterCount: Int {
        operations.filter { if case .filter = $0 { return true } else { return false } }.count
    }
}
