import Foundation
import IdentifiedCollections
import Observation
import Synchronization
import TandemCore

/// What a ``SyncedCollection`` holds: which collection, in which order, and what it shows in tests.
public struct CollectionConfiguration<Value: DocumentIdentifiable>: Sendable {
    /// The collection's path, read again each time the handle attaches; nil while there is none (no
    /// user signed in yet): the handle is then not available.
    public var collectionPath: @Sendable () -> String?
    /// The field the value is ordered by, and whether ascending; ties (and no order) go by document id.
    public var orderBy: (field: String, ascending: Bool)?
    /// Filters, cursors and limits beyond the order (`Query()` when nil).
    public var query: Query?
    /// The value shown by previews and tests, which make no connection.
    public var testingValue: [Value]?

    public init(collectionPath: String, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil) {
        self.init(collectionPath: { collectionPath }, orderBy: orderBy, query: query, testingValue: testingValue)
    }

    public init(collectionPath: @escaping @Sendable () -> String?, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil) {
        self.collectionPath = collectionPath
        self.orderBy = orderBy.map { (field: $0.0, ascending: $0.1) }
        self.query = query
        self.testingValue = testingValue
    }

    /// The query the handle listens to: `query`, then ordered by `orderBy`.
    public var listenedQuery: Query {
        var query = self.query ?? Query()
        if let orderBy {
            let field = (try? FieldPath(dotted: orderBy.field)) ?? FieldPath(stringLiteral: orderBy.field)
            query = query.order(by: field, descending: !orderBy.ascending)
        }
        return query
    }
}

/// A collection held as plain state: edit `value` with ``withLock(_:)``, and each edit becomes
/// writes through an engine's durable outbox; the server's changes flow back in.
///
/// ```swift
/// let todos = SyncedCollection(CollectionConfiguration<Todo>(collectionPath: "todos", orderBy: ("memo", true)),
///                              client: client)
/// await todos.load()
/// todos.withLock { $0.append(Todo(memo: "Buy milk")) }          // shown at once, sent in order
/// todos.withLock { $0[id: milk.clientId]?.completed = true }    // writes `completed` alone
/// todos.withLock { _ = $0.remove(id: milk.clientId) }           // deletes that document
/// ```
///
/// An edit is diffed against the value before it, element by element, by `clientId`, never against
/// a read of the server (see ``SyncedEdits``): a new element gets its `documentId` at once and is
/// created; a changed one is merged, exactly the field paths that changed; a removed one is deleted;
/// a document another client added is never deleted; moving elements writes nothing. The writes of
/// one edit form one atomic batch, queued in the order the edits were made, durable across a
/// restart, sent exactly once.
///
/// The value is the engine's view: the server's documents with every edit not yet acknowledged
/// applied on top, so a change from the server never reverts an edit still on its way; it stays in
/// the configuration's order. An edit the server refuses for good is rolled back, and `lastError`
/// says why.
public final class SyncedCollection<Value: DocumentIdentifiable>: Observable, Sendable {
    public let configuration: CollectionConfiguration<Value>
    /// The engine underneath: its cache, outbox and listener.
    let engine: CollectionSyncEngine<SyncedRow>
    private let remote: any RemoteCollectionService
    /// The listened query, compiled, for the value's order.
    private let order: CompiledQuery?
    private let registrar = ObservationRegistrar()
    private let state: Mutex<State>
    private let observer = Mutex<Int?>(nil)
    /// Who awaits the handle's changes (``changeSignals()``).
    private let signals = Mutex<(next: Int, continuations: [Int: AsyncStream<Void>.Continuation])>((0, [:]))

    /// What the handle knows of one element: the document it is, and the value last decoded from
    /// its fields (or last written), with the order values taken from them.
    private struct Known {
        var path: DocumentPath
        var fields: JSONObject?
        var orderValues: [JSONValue?]
        var value: Value
    }

    private struct State {
        var value: IdentifiedArrayOf<Value>
        var known: [UUID: Known] = [:]
        /// The app's identity of each document, kept for as long as the handle lives.
        var clientIds: [String: UUID] = [:]
        /// Edits queued and not yet in the engine's view: until they are, the engine's view would
        /// show the value without them, so it is not taken.
        var unrecorded: [WriteTicket] = []
        /// Edits queued so far.
        var submitted = 0
        var lastError: (any Error)?
        var loadError: (any Error)?
        var isLoading = false
        /// How many of the engine's rejected writes were reported.
        var rejectedSeen = 0
    }

    /// - Parameters:
    ///   - configuration: the collection, its order and its testing value.
    ///   - remote: the server side (``TandemRemoteCollectionService`` or a mock).
    ///   - persistence: where the cache and the outbox are kept (nil: memory only).
    ///   - managerKey: names the engine's cache, outbox and analytics events. Default: from the path
    ///     and query, so handles of other collections never share a cache.
    public init(_ configuration: CollectionConfiguration<Value>, remote: any RemoteCollectionService,
                persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil) {
        self.configuration = configuration
        self.remote = remote
        let query = configuration.listenedQuery
        order = try? CompiledQuery(query)
        let key = managerKey ?? "synced-\(configuration.collectionPath() ?? "none")-\(SyncCore<SyncedRow>.digest(of: query))"
        engine = CollectionSyncEngine<SyncedRow>(remote: remote, managerKey: key, persistence: persistence, logger: logger)
        state = Mutex(State(value: IdentifiedArray(uniqueElements: [])))
        let token = engine.core.addObserver { [weak self] in self?.engineChanged() }
        observer.withLock { $0 = token }
        refresh()
    }

    /// A handle on a ``TandemClient``'s server.
    public convenience init(_ configuration: CollectionConfiguration<Value>, client: TandemClient,
                            persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil) {
        self.init(configuration, remote: TandemRemoteCollectionService(client: client, collectionPath: configuration.collectionPath),
                  persistence: persistence, managerKey: managerKey, logger: logger)
    }

    deinit {
        if let token = observer.withLock({ $0 }) { engine.core.removeObserver(token) }
    }

    // MARK: State

    /// The collection: the server's documents with every pending edit applied, in the
    /// configuration's order.
    public var value: IdentifiedArrayOf<Value> {
        registrar.access(self, keyPath: \.value)
        return state.withLock { $0.value }
    }

    /// Whether an edit is not yet acknowledged by the server.
    public var hasPendingWrites: Bool {
        registrar.access(self, keyPath: \.hasPendingWrites)
        return state.withLock { !$0.unrecorded.isEmpty } || engine.core.pendingWriteCount > 0
    }

    /// Whether the first state is still loading.
    public var isLoading: Bool {
        registrar.access(self, keyPath: \.isLoading)
        return state.withLock { $0.isLoading }
    }

    /// Why the collection could not be loaded (no path: nobody signed in), if it could not.
    public var loadError: (any Error)? {
        registrar.access(self, keyPath: \.loadError)
        return state.withLock { $0.loadError }
    }

    /// The last edit that failed for good: refused by the server (it was rolled back), or refused
    /// at once (no collection, an invalid value).
    public var lastError: (any Error)? {
        registrar.access(self, keyPath: \.lastError)
        return state.withLock { $0.lastError }
    }

    // MARK: Loading

    /// Attaches the handle's listener (one, however often it is called) and returns once the first
    /// state is in, or at once with the cache when the server cannot be reached. Not available (no
    /// path): `loadError` says why, and no listener runs.
    public func load() async {
        do {
            _ = try remote.collectionPath()
        } catch {
            set(\.loadError) { $0.loadError = error }
            return
        }
        set(\.isLoading) { $0.isLoading = true }
        let query = configuration.listenedQuery
        await engine.startListening { _ in query }
        set(\.isLoading) { $0.isLoading = false }
        set(\.loadError) { $0.loadError = nil }
    }

    /// Returns once every edit made so far is in the engine's outbox, durable (not once the server
    /// answered it). Throws the error of one that could not be stored.
    public func save() async throws {
        let tickets = state.withLock { $0.unrecorded }
        for ticket in tickets {
            if let error = await ticket.recorded() { throw error }
        }
    }

    // MARK: Editing

    /// Edits the value: the closure's changes are shown at once and become writes (see the type's
    /// description). Returns what the closure returns. Do not read or edit this handle inside it.
    ///
    /// An edit that cannot be written (no collection now, a value that does not encode, a path the
    /// server would refuse) is not applied: the value stays as it was and `lastError` says why.
    @discardableResult
    public func withLock<Result>(_ edit: (inout IdentifiedArrayOf<Value>) throws -> Result) rethrows -> Result {
        var failure: (any Error)?
        var tickets: [WriteTicket] = []
        let result = try state.withLock { state -> Result in
            var value = state.value
            let result = try edit(&value)
            do {
                tickets = try apply(value, to: &state)
            } catch {
                failure = error
                state.lastError = error
            }
            return result
        }
        if failure != nil {
            changed(\.lastError)
        } else {
            changed(\.value)
            if !tickets.isEmpty { changed(\.hasPendingWrites) }
        }
        for ticket in tickets { watch(ticket) }
        return result
    }

    /// Turns the edited value into writes, queues them, and takes the value (in order), in the
    /// handle's locked step. Throws, changing nothing, when the edit cannot be written.
    private func apply(_ edited: IdentifiedArrayOf<Value>, to state: inout State) throws -> [WriteTicket] {
        let collection = try remote.collectionPath()
        var value = edited
        var before: [(UUID, SyncedEdits.Element)] = []
        for element in state.value {
            guard let known = state.known[element.clientId] else { continue }
            before.append((element.clientId, SyncedEdits.Element(documentId: known.path.id, body: [:])))
        }
        var after: [(UUID, SyncedEdits.Element)] = []
        var changed: Set<UUID> = []
        var known: [UUID: Known] = [:]
        for index in value.indices {
            var element = value[index]
            if element.documentId == nil {
                // Its id now, written back: a second edit before the server answers updates it.
                element.documentId = SyncedKeys.newDocumentID()
                value[id: element.clientId] = element
            }
            let documentId = element.documentId!
            if let previous = state.known[element.clientId], previous.path.id == documentId, previous.value == element {
                after.append((element.clientId, SyncedEdits.Element(documentId: documentId, body: [:])))
                continue
            }
            let body = try SyncedKeys.body(of: element)
            let path = try collection.document(documentId)
            changed.insert(element.clientId)
            after.append((element.clientId, SyncedEdits.Element(documentId: documentId, body: body)))
            known[element.clientId] = Known(path: path, fields: body, orderValues: order?.orderValues(body) ?? [], value: element)
        }
        // The old bodies of the changed elements alone: the others are equal, and not encoded.
        for index in before.indices where changed.contains(before[index].0) {
            if let previous = state.known[before[index].0] { before[index].1.body = try SyncedKeys.body(of: previous.value) }
        }
        let writes = try SyncedEdits.writes(before: before, after: after, changed: changed, in: collection)
        var tickets: [WriteTicket] = []
        // One atomic batch per edit, in pieces of the most a batch may hold.
        var start = 0
        while start < writes.count {
            let piece = Array(writes[start..<min(start + 500, writes.count)])
            tickets.append(try engine.core.enqueueBatch(piece) { [weak self] in self?.refresh() })
            start += piece.count
        }
        let kept = Set(value.ids)
        for (clientId, element) in known {
            state.known[clientId] = element
            state.clientIds[element.path.id] = clientId
        }
        for id in state.known.keys where !kept.contains(id) { state.known.removeValue(forKey: id) }
        state.value = ordered(value, known: state.known)
        state.unrecorded += tickets
        state.submitted += tickets.count
        return tickets
    }

    /// Reports a queued edit that could not be stored (the engine rolled it back) as `lastError`.
    /// Refusals by the server, which may come long after (an edit made offline), are taken from
    /// the engine's rejected writes as they come.
    private func watch(_ ticket: WriteTicket) {
        Task { [weak self] in
            guard let error = await ticket.recorded(), let self else { return }
            self.set(\.lastError) { $0.lastError = error }
        }
    }

    // MARK: The engine's view

    private func engineChanged() {
        refresh()
        changed(\.hasPendingWrites)
        // A refusal for good: the engine rolled the edit back; the handle says why.
        let rejected = engine.core.rejectedWrites
        let refusal = state.withLock { state -> TandemError? in
            guard rejected.count > state.rejectedSeen else {
                state.rejectedSeen = rejected.count
                return nil
            }
            state.rejectedSeen = rejected.count
            state.lastError = rejected.last?.error
            return rejected.last?.error
        }
        if refusal != nil { changed(\.lastError) }
    }

    /// Takes the engine's view as the value, unless an edit is queued and not in it yet (the edit's
    /// own recording refreshes again). Elements keep their `clientId`; documents whose fields did
    /// not change are not decoded again.
    private func refresh() {
        let snapshot = state.withLock { state -> (submitted: Int, known: [UUID: Known], clientIds: [String: UUID])? in
            state.unrecorded.removeAll { $0.isRecorded }
            return state.unrecorded.isEmpty ? (state.submitted, state.known, state.clientIds) : nil
        }
        guard let snapshot else { return }
        let documents = engine.core.shownDocuments
        var values: [Value] = []
        values.reserveCapacity(documents.count)
        var known: [UUID: Known] = [:]
        var clientIds = snapshot.clientIds
        for (path, row) in documents {
            let clientId = clientIds[path.id] ?? UUID()
            clientIds[path.id] = clientId
            if let previous = snapshot.known[clientId], previous.path == path, previous.fields == row.fields {
                values.append(previous.value)
                known[clientId] = previous
                continue
            }
            do {
                let value = try SyncedKeys.value(Value.self, from: row.fields, clientId: clientId, documentId: path.id)
                values.append(value)
                known[clientId] = Known(path: path, fields: row.fields, orderValues: order?.orderValues(row.fields) ?? [], value: value)
            } catch {
                engine.core.logDecodeFailure(path, error)
            }
        }
        let taken = state.withLock { state -> Bool in
            guard state.submitted == snapshot.submitted, state.unrecorded.isEmpty else { return false }
            state.value = IdentifiedArray(uniqueElements: values)
            state.known = known
            state.clientIds = clientIds
            return true
        }
        if taken { changed(\.value) }
    }

    /// The value in the configuration's order (the order fields, then the document path), sorted
    /// only when it is not already.
    private func ordered(_ value: IdentifiedArrayOf<Value>, known: [UUID: Known]) -> IdentifiedArrayOf<Value> {
        func precedes(_ a: Value, _ b: Value) -> Bool {
            guard let x = known[a.clientId], let y = known[b.clientId] else { return known[a.clientId] != nil }
            if let order { return order.sortsBefore(x.orderValues, x.path, y.orderValues, y.path) }
            return x.path < y.path
        }
        if zip(value, value.dropFirst()).allSatisfy({ !precedes($1, $0) }) { return value }
        var sorted = value
        sorted.sort(by: precedes)
        return sorted
    }

    /// Changes the state in a locked step, then tells observers of `keyPath`.
    private func set<Member>(_ keyPath: KeyPath<SyncedCollection, Member>, _ change: (inout State) -> Void) {
        state.withLock { change(&$0) }
        changed(keyPath)
    }

    /// Tells Observation's observers of `keyPath`, and whoever awaits the handle's changes.
    private func changed<Member>(_ keyPath: KeyPath<SyncedCollection, Member>) {
        registrar.withMutation(of: self, keyPath: keyPath) {}
        for continuation in signals.withLock({ Array($0.continuations.values) }) { continuation.yield() }
    }

    /// A signal after each change of the handle's state, for tests that await one (see
    /// `waitUntil` in `TandemTesting`).
    package func changeSignals() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let token = signals.withLock { signals -> Int in
            signals.next += 1
            signals.continuations[signals.next] = continuation
            return signals.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.signals.withLock { $0.continuations.removeValue(forKey: token) }
        }
        return stream
    }
}
