import Synchronization
import TandemCore

/// The one door to the store: HTTP and the WebSocket stream both read, listen and write through it,
/// and nothing else touches the store. It checks every request against the server's limits
/// (``SyncServerConfiguration/limits``, the only copy) and the caller's ``Principal`` before
/// the store sees it.
final class SyncService: Sendable {
    let store: any ServerStore
    let hub: FanOutHub
    let limits: ServerLimits
    /// Nil on a server that runs open.
    let access: AccessControl?
    /// WebSocket sessions open now, for `/metrics`.
    let streamSessions = Atomic<Int>(0)
    /// What the server counts (``ServerMetrics``).
    let metrics: ServerMetrics
    /// Every limit and quota a request passes before it is acted on.
    let admission: Admission

    /// - Parameter now: the server's clock, for the per-user write and HTTP read rates.
    init(store: any ServerStore, hub: FanOutHub, limits: ServerLimits, access: AccessControl? = nil, metrics: ServerMetrics = ServerMetrics(),
         now: @escaping @Sendable () -> Duration) {
        self.metrics = metrics
        self.store = store
        self.hub = hub
        self.limits = limits
        self.access = access
        admission = Admission(limits: limits, now: now)
    }

    // MARK: Identity

    /// The identity a bearer token proves (anonymous without one, or on an open server).
    func authenticate(token: String?) throws(TandemError) -> Principal.Identity {
        guard let access else { return .anonymous }
        return try access.authenticate(token)
    }

    /// The identity of an HTTP request's `Authorization` header.
    func authenticate(authorization: String?) throws(TandemError) -> Principal.Identity {
        guard let access else { return .anonymous }
        return try access.authenticate(authorization: authorization)
    }

    // MARK: Reads

    /// The store's visible watermark.
    func currentVersion() async throws -> Version {
        try await store.currentVersion()
    }

    /// One document (or none) and a version at least its own.
    func get(_ path: DocumentPath, context: Principal) async throws -> StoreSnapshot {
        try checkDepth(path.segments.count, of: path.description)
        let readGuard = try access?.readGuard(for: path, by: context.identity)
        let snapshot = try await store.read(.document(path))
        if let readGuard, let refusal = readGuard.check(snapshot.documents.first) { throw refusal }
        return snapshot
    }

    /// A query's documents once, and the version they were read at.
    func query(_ target: ListenTarget, context: Principal) async throws -> StoreSnapshot {
        if case .document(let path) = target { return try await get(path, context: context) }
        try check(target)
        try access?.checkList(target, by: context.identity)
        return try await store.read(target)
    }

    /// The ids of the collections under `parent` (the root when nil) that hold a document and that
    /// the caller may list whole (on an open server, all of them). An id the caller may not list
    /// is left out, as if it held nothing, so the answer tells nothing the caller could not read.
    func collectionIDs(under parent: DocumentPath?, context: Principal) async throws -> [String] {
        if let parent { try checkDepth(parent.segments.count + 1, of: parent.description) }
        let ids = try await store.collectionIDs(under: parent)
        guard let access else { return ids }
        return ids.filter { id in
            guard let path = try? parent.map({ try $0.collection(id) }) ?? CollectionPath(id) else { return false }
            return access.mayBrowse(.collection(path, Query()), by: context.identity)
        }
    }

    /// The collection-group names that hold a document and that the caller may list whole.
    func collectionGroups(context: Principal) async throws -> [String] {
        let groups = try await store.collectionGroups()
        guard let access else { return groups }
        return groups.filter { access.mayBrowse(.collectionGroup($0, Query()), by: context.identity) }
    }

    /// A page of the change feed after `version`, over everything (`target` nil) or one target.
    /// The most changes one page of a change feed holds (a `fetch`'s or `/v1/changes`' `limit` above
    /// it is lowered to it).
    static let maximumChangesPerPage = 10_000

    /// `fromStart`: the page continues a read that began at version 0 (served whatever was pruned).
    func changes(since version: Version, in target: ListenTarget?, limit: Int, fromStart: Bool = false, context: Principal) async throws -> ChangePage {
        var readGuard: ReadGuard?
        if let target {
            try check(target)
            readGuard = try access?.checkRead(target, by: context.identity)
        } else {
            try access?.checkWholeChangeFeed(by: context.identity)
        }
        let page = fromStart && version > .zero
            ? try await store.changes(continuingFromStartAfter: version, in: target, limit: limit)
            : try await store.changes(since: version, in: target, limit: limit)
        if let refusal = readGuard?.refusal(of: page.changes) { throw refusal }
        return page
    }

    /// Registers a listener at once (see ``FanOutHub/register(_:target:outbox:limit:readGuard:restricted:)``), after
    /// checking its target against the limits; ``load(_:target:resumeFrom:)`` then sends its
    /// snapshot (or its changes since a version) and makes it live.
    /// A `notify` listener (told each commit's version only) watches a whole scope, which its
    /// caller may read whole: not one whose every document the rules must check.
    func register(_ key: ListenerKey, target: ListenTarget, outbox: SessionOutbox, context: Principal, notify: Bool = false) -> Result<Void, FanOutHub.RegistrationError> {
        let readGuard: ReadGuard?
        do {
            try check(target)
            if notify, let query = target.query, !query.operations.isEmpty {
                throw TandemError.invalidArgument("A notify listener watches a whole document, collection or collection group: give its target no filters, order or limit, and filter what you read.")
            }
            readGuard = try access?.checkRead(target, by: context.identity)
            if notify, readGuard != nil {
                throw TandemError(.permissionDenied, "The access rules decide this document by its content, so a listener is told of it only with it: listen without notify.")
            }
        } catch {
            return .failure(.refused(Self.tandemError(error)))
        }
        return hub.register(key, target: target, outbox: outbox, limit: admission.listenersPerConnection, readGuard: readGuard, restricted: access != nil, notify: notify)
    }

    /// Loads a registered listener; a failure is sent as an error frame answering the listen.
    func load(_ key: ListenerKey, target: ListenTarget, resumeFrom: Version?) async {
        await hub.load(key, target: target, resumeFrom: resumeFrom)
    }

    func unlisten(_ key: ListenerKey) {
        hub.unlisten(key)
    }

    // MARK: Writes

    /// Commits write requests in order (see ``ServerStore/commit(_:limits:clientID:authorizer:)``),
    /// after checking each against the limits; the access rules decide each write inside the
    /// commit, against the document before and after it. The caller's ``Principal/writerOwner``
    /// owns the writer ids it uses first; a request under a writer id another owner holds fails
    /// with `permission-denied`.
    func commit(_ requests: [[Mutation]], context: Principal) async -> [Result<CommitResult, TandemError>] {
        var admitted: [[Mutation]] = []
        var early: [Int: TandemError] = [:]
        for (index, mutations) in requests.enumerated() {
            do throws(TandemError) {
                try admission.checkBatch(mutations)
                admitted.append(mutations)
            } catch {
                early[index] = error
            }
        }
        var decided: ArraySlice<Result<CommitResult, TandemError>> = []
        if !admitted.isEmpty {
            let started = ContinuousClock.now
            decided = await store.commit(admitted, limits: limits, clientID: context.writerOwner, authorizer: access?.writeAuthorizer(for: context.identity))[...]
            metrics.committed(decided, in: ContinuousClock.now - started)
        }
        if let access {
            // A write's answer carries the document it left: only to a caller who may read it.
            for index in decided.indices {
                guard case .success(var result) = decided[index] else { continue }
                var changed = false
                for (at, acknowledgement) in result.acknowledgements.enumerated() {
                    if let document = acknowledgement.document, !access.mayRead(document, by: context.identity) {
                        result.acknowledgements[at] = acknowledgement.concealed
                        changed = true
                    }
                }
                if changed { decided[index] = .success(result) }
            }
        }
        return requests.indices.map { index in
            if let error = early[index] { return .failure(error) }
            return decided.removeFirst()
        }
    }

    // MARK: Checks

    private func check(_ target: ListenTarget) throws {
        switch target {
        case .document(let path): try checkDepth(path.segments.count, of: path.description)
        case .collection(let path, let query):
            try checkDepth(path.segments.count + 1, of: path.description)
            _ = try CompiledQuery(query)
        case .collectionGroup(_, let query):
            _ = try CompiledQuery(query)
        }
    }

    private func checkDepth(_ depth: Int, of path: String) throws(TandemError) {
        if depth > limits.maximumPathDepth {
            throw TandemError.invalidArgument("The path \(path) has \(depth) segments; this server allows at most \(limits.maximumPathDepth).")
        }
    }

    static func tandemError(_ error: any Error) -> TandemError {
        if let error = error as? TandemError { return error }
        return TandemError(.internal, "The server failed: \(error).")
    }
}
