import Foundation
import IdentifiedCollections
import Synchronization
import TandemCore

/// Where synced state runs: against its server, or under tests, where each handle shows its
/// configuration's testing value, edits change only that value, and no connection is made.
///
/// ```swift
/// try await SyncedStateContext.$current.withValue(.test) {
///     let todos = SyncedCollection(configuration, client: client)   // shows configuration.testingValue
///     todos.withLock { $0.append(Todo(memo: "a")) }                  // changes the value; writes nothing
/// }
/// ```
public enum SyncedStateContext: Sendable, Hashable {
    /// Against the server: handles listen and write.
    case live
    /// Under tests and previews: each handle shows its configuration's testing value, edits change
    /// only that value, and nothing is listened to or written.
    case test

    /// The context handles made now run in: `.live` unless a test set `.test` (for its task and
    /// the tasks it starts).
    @TaskLocal public static var current: SyncedStateContext = .live
}

/// What a change of synced state touched, so each handle tells the observers of those properties.
struct SyncedChanges: OptionSet, Sendable {
    let rawValue: Int
    static let value = SyncedChanges(rawValue: 1)
    static let hasPendingWrites = SyncedChanges(rawValue: 2)
    static let lastError = SyncedChanges(rawValue: 4)
    static let loadError = SyncedChanges(rawValue: 8)
    static let isLoading = SyncedChanges(rawValue: 16)
}

/// The machinery the synced handles share (``SyncedCollection``, ``SyncedDocument``,
/// ``SyncedQuery``): their elements over an engine's view, each edit turned into writes queued on the
/// engine's executor in the order made, and the engine's changes taken back in.
final class SyncedStore<Value: DocumentIdentifiable>: Sendable {
    /// What the store knows of one element: the document it is, and the value last decoded from
    /// its fields (or last written), with the order values taken from them.
    struct Known: Sendable {
        var path: DocumentPath
        var fields: JSONObject?
        var orderValues: [JSONValue?]
        var value: Value
    }

    struct State {
        var value: IdentifiedArrayOf<Value>
        var known: [UUID: Known] = [:]
        /// The bytes of the value's elements before an edit (see ``SyncedStore/edit(_:)``), kept
        /// from one edit to the next so the copy reuses its memory.
        var bytes: [UInt8] = []
        /// The app's identity of each document, kept for as long as the store lives.
        var clientIds: [String: UUID] = [:]
        /// Edits queued and not yet known to be in the engine's view, with the elements each
        /// touched: until an edit is, the engine's view would show those elements without it, so
        /// they are not taken from it (and nothing is, when the view is taken whole).
        var pending: [PendingEdit] = []
        /// The error of an edit that could not be stored, taken out of `pending` before a
        /// `save()` heard of it: the next `save()` throws it.
        var unsaved: (any Error)?
        /// Pending edits whose failure a `save()` threw already: not kept in `unsaved` again.
        var failuresTold: Set<ObjectIdentifier> = []
        /// Edits queued so far.
        var submitted = 0
        var lastError: (any Error)?
        var loadError: (any Error)?
        var isLoading = false
        /// How many of the engine's rejected writes were reported.
        var rejectedSeen = 0
        /// The generation of the engine's snapshot the value was last taken from: an older one,
        /// read by a refresh that lost a race with a newer one, is never taken after it.
        var generation: UInt64 = 0
        /// The engine's space epoch the value was taken in (``EngineSnapshot/space``): an edit of
        /// it is recorded only while the engine still shows that space.
        var space = 0
        /// The engine's snapshot the value was last taken from, while the value is aligned with it
        /// (its elements are the snapshot's shown documents, in that order): a refresh then decodes
        /// only the documents whose model changed since. Nil when the value is not aligned (an
        /// edit moved, added or removed an element; a document did not decode).
        var aligned: EngineSnapshot<SyncedRow>?
        /// The listened query, compiled, for the value's order.
        var order: CompiledQuery?
        /// Who the remote says is signed in, when it has a sign-in to follow, and whether anyone
        /// was signed in since the store was made.
        var auth: AuthState?
        var heardSignedIn = false

        /// Whether the value is hidden: someone signed out, or another user signed in and the
        /// engine does not show their space yet. A relaunch before any sign-in is confirmed shows
        /// the cache (the last user's, as the engine does).
        func hidden(spaceUser: String?) -> Bool {
            guard let auth, heardSignedIn else { return false }
            guard let uid = auth.uid else { return true }
            return uid != spaceUser
        }
    }

    /// One queued edit: its ticket, and the elements it touched.
    struct PendingEdit: Sendable {
        let ticket: WriteTicket
        let touched: Set<UUID>
    }

    /// A closure in a class box: kept directly in a `Mutex`, it would be re-wrapped on every access.
    final class Listener: Sendable {
        let call: @Sendable (SyncedChanges) -> Void
        init(_ call: @escaping @Sendable (SyncedChanges) -> Void) { self.call = call }
    }

    let core: SyncCore<SyncedRow>
    /// The collection the documents are in now, or the error that says why there is none.
    let collectionPath: @Sendable () throws -> CollectionPath
    /// Under a testing context: the value is the testing value, edits change it alone, and
    /// nothing is listened to or written.
    let isTesting: Bool
    let state: Mutex<State>
    /// The handles sharing this store, told of each change.
    private let listeners = Mutex<(next: Int, all: [Int: Listener])>((0, [:]))
    private let observer = Mutex<Int?>(nil)
    /// How the store's listener attaches (set by its handle with ``follow(_:listen:)``), and
    /// whether a handle asked it to: a sign-in that makes the collection available attaches then.
    private let following = Mutex<(wanted: Bool, observation: ConnectionObservation?, listen: Listen?)>((false, nil, nil))

    /// Attaches the engine's listener; the error that kept it from attaching, if one did.
    final class Listen: Sendable {
        let run: @Sendable () async -> (any Error)?
        init(_ run: @escaping @Sendable () async -> (any Error)?) { self.run = run }
    }
    /// Who awaits the handle's changes (``changeSignals()``).
    private let signals = Mutex<(next: Int, continuations: [Int: AsyncStream<Void>.Continuation])>((0, [:]))

    init(core: SyncCore<SyncedRow>, collectionPath: @escaping @Sendable () throws -> CollectionPath, order: Query?, clientIds: [String: UUID] = [:],
         testingValue: [Value]? = nil) {
        self.core = core
        self.collectionPath = collectionPath
        isTesting = SyncedStateContext.current == .test
        var initial = State(value: IdentifiedArray(uniqueElements: []))
        initial.order = order.flatMap { try? CompiledQuery($0) }
        initial.clientIds = clientIds
        initial.space = core.spaceEpoch
        if isTesting {
            initial.value = IdentifiedArray(testingValue ?? [], uniquingIDsWith: { first, _ in first })
        }
        state = Mutex(initial)
        guard !isTesting else { return }
        let token = core.addObserver { [weak self] in self?.engineChanged() }
        observer.withLock { $0 = token }
        refresh()
    }

    deinit {
        if let token = observer.withLock({ $0 }) { core.removeObserver(token) }
    }

    /// Tells `call` of each change (a handle, which tells its observers), until removed.
    func addListener(_ call: @escaping @Sendable (SyncedChanges) -> Void) -> Int {
        listeners.withLock { listeners in
            listeners.next += 1
            listeners.all[listeners.next] = Listener(call)
            return listeners.next
        }
    }

    func removeListener(_ token: Int) {
        _ = listeners.withLock { $0.all.removeValue(forKey: token) }
    }

    /// Attaches through `listen` when ``load()`` is called, and again whenever `remote` says a
    /// user signed in once a handle asked to load: a collection whose path follows the user
    /// becomes available then.
    ///
    /// Signed out, or while the engine has not switched to the user who just signed in, the value
    /// is hidden (empty) and edits are refused: no one sees another user's elements.
    func follow(_ remote: any ReachabilityReporting, listen: @escaping @Sendable () async -> (any Error)?) {
        let observation = remote.observeAuthState { [weak self] auth in
            guard let self else { return }
            self.state.withLock { state in
                state.auth = auth
                if case .signedIn = auth { state.heardSignedIn = true }
            }
            if self.refresh() { self.changed(.value) }
            guard case .signedIn = auth else { return }
            guard self.following.withLock({ $0.wanted }) else { return }
            Task { [weak self] in await self?.load() }
        }
        following.withLock {
            $0.observation = observation
            $0.listen = Listen(listen)
        }
    }

    // MARK: State

    var value: IdentifiedArrayOf<Value> { state.withLock { $0.value } }
    var hasPendingWrites: Bool { state.withLock { $0.pending.contains { !$0.ticket.isRecorded } } || core.pendingWriteCount > 0 }
    var isLoading: Bool { state.withLock { $0.isLoading } }
    var loadError: (any Error)? { state.withLock { $0.loadError } }
    var lastError: (any Error)? { state.withLock { $0.lastError } }

    /// Changes the state in a locked step, then tells whoever listens.
    func set(_ changes: SyncedChanges, _ change: (inout State) -> Void) {
        state.withLock { change(&$0) }
        changed(changes)
    }

    func changed(_ changes: SyncedChanges) {
        guard !changes.isEmpty else { return }
        for listener in listeners.withLock({ Array($0.all.values) }) { listener.call(changes) }
        for continuation in signals.withLock({ Array($0.continuations.values) }) { continuation.yield() }
    }

    /// A signal after each change, for tests that await one (`waitUntil` in `TandemTesting`).
    func changeSignals() -> AsyncStream<Void> {
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

    /// The order of the value from now on (a query swapped for another).
    func setOrder(_ query: Query) {
        state.withLock { $0.order = try? CompiledQuery(query) }
    }

    // MARK: Loading

    /// Attaches the listener (see ``follow(_:listen:)``) and returns once the first state is in.
    /// Not available (no collection): `loadError` says why, and nothing is attached.
    func load() async {
        guard !isTesting else { return }
        guard let listen = following.withLock({ state -> Listen? in
            state.wanted = true
            return state.listen
        }) else { return }
        do {
            _ = try collectionPath()
        } catch {
            set(.loadError) { $0.loadError = error }
            return
        }
        set(.isLoading) { $0.isLoading = true }
        let error = await listen.run()
        set([.isLoading, .loadError]) {
            $0.isLoading = false
            $0.loadError = error
        }
    }

    /// Returns once every edit made so far is in the engine's outbox, durably. Throws the error of
    /// one that could not be stored, including one a refresh took out of `pending` already.
    func save() async throws {
        let tickets = state.withLock { $0.pending.map(\.ticket) }
        for ticket in tickets {
            if let error = await ticket.recorded() {
                state.withLock { state in
                    state.unsaved = nil
                    if state.pending.contains(where: { $0.ticket === ticket }) { state.failuresTold.insert(ObjectIdentifier(ticket)) }
                }
                throw error
            }
        }
        if let error = state.withLock({ state in defer { state.unsaved = nil }; return state.unsaved }) { throw error }
    }

    /// Takes the recorded edits out of `pending`, keeping the error of one that was not stored
    /// for the next `save()`.
    private static func dropRecorded(_ recorded: Set<ObjectIdentifier>, from state: inout State) {
        for edit in state.pending where recorded.contains(ObjectIdentifier(edit.ticket)) {
            let told = state.failuresTold.remove(ObjectIdentifier(edit.ticket)) != nil
            if case .notStored(let error)? = edit.ticket.currentOutcome, !told { state.unsaved = error }
        }
        state.pending.removeAll { recorded.contains(ObjectIdentifier($0.ticket)) }
    }

    // MARK: Editing

    /// Runs `edit` on the value in the store's locked step, then turns what it changed into writes
    /// and queues them. An edit that cannot be written leaves the value as it was and sets
    /// `lastError`.
    ///
    /// The closure changes the value in place (an edit of one element of many copies nothing
    /// else). What it touched is found by comparing each element's bytes with a copy of them taken
    /// before: an element whose bytes are the same holds the same references and values, so it is
    /// unchanged, and only the others are compared as values. The old value of an element is the
    /// one the store knows it by (`known`), which holds its references, so no freed storage can
    /// come back at an old address and pass for it.
    func edit<Result>(_ edit: (inout IdentifiedArrayOf<Value>) throws -> Result) rethrows -> Result {
        var failure: (any Error)?
        var tickets: [WriteTicket] = []
        let result = try state.withLock { state -> Result in
            if isTesting {
                var value = state.value
                let result = try edit(&value)
                // Nothing is written: the edit is the value.
                for index in value.indices where value[index].documentId == nil {
                    var element = value[index]
                    element.documentId = SyncedKeys.newDocumentID()
                    value[id: element.clientId] = element
                }
                state.value = value
                return result
            }
            // The value, uniquely referenced, so the closure changes it in place.
            var value = state.value
            state.value = []
            let old = Self.fingerprint(value, into: &state.bytes)
            let result: Result
            do {
                result = try edit(&value)
            } catch {
                state.value = restored(value, old: old, state: state)
                throw error
            }
            do {
                tickets = try apply(&value, old: old, to: &state)
            } catch {
                failure = error
                state.lastError = error
                state.value = restored(value, old: old, state: state)
            }
            return result
        }
        if failure != nil {
            changed(.lastError)
        } else {
            changed(tickets.isEmpty ? .value : [.value, .hasPendingWrites])
        }
        for ticket in tickets { watch(ticket) }
        return result
    }

    /// Turns the edited value into writes, queues them, and takes the value (in order), in the
    /// store's locked step. Throws, changing nothing, when the edit cannot be written.
    private func apply(_ value: inout IdentifiedArrayOf<Value>, old: Fingerprint, to state: inout State) throws -> [WriteTicket] {
        if state.hidden(spaceUser: core.spaceUser) {
            throw TandemError(.unavailable, "Nobody is signed in now (or the user who just signed in is not shown yet); the edit was not made.")
        }
        let collection = try collectionPath()
        // What the edit touched: elements whose bytes changed, compared as values with what the
        // store knew of them.
        var touched: [Int] = []
        var removed: [UUID] = []
        var moved = false
        if let differing = Self.differing(value, old: old, bytes: state.bytes) {
            touched = differing.filter { Self.differs(value[$0], from: state.known[value[$0].clientId]?.value) }
        } else {
            moved = true
            removed = old.ids.filter { value[id: $0] == nil }
            touched = value.indices.filter { value[$0] != state.known[value[$0].clientId]?.value }
        }
        var before: [(UUID, SyncedEdits.Element)] = []
        var after: [(UUID, SyncedEdits.Element)] = []
        var changed: Set<UUID> = []
        var known: [UUID: Known] = [:]
        var reordered = moved
        for index in touched {
            var element = value[index]
            if element.documentId == nil {
                // Its id now, written back: a second edit before the server answers updates it.
                element.documentId = SyncedKeys.newDocumentID()
                value[id: element.clientId] = element
            }
            let documentId = element.documentId!
            let body = try SyncedKeys.body(of: element)
            let path = try collection.document(documentId)
            let entry = Known(path: path, fields: body, orderValues: state.order?.orderValues(body) ?? [], value: element)
            if let previous = state.known[element.clientId] {
                // The old body of a changed element alone: the others are equal, and not encoded.
                before.append((element.clientId, SyncedEdits.Element(documentId: previous.path.id, body: try SyncedKeys.body(of: previous.value))))
                changed.insert(element.clientId)
                if previous.path != path || !previous.orderValues.elementsEqual(entry.orderValues, by: ==) { reordered = true }
            } else {
                reordered = true
            }
            after.append((element.clientId, SyncedEdits.Element(documentId: documentId, body: body)))
            known[element.clientId] = entry
        }
        for clientId in removed {
            if let previous = state.known[clientId] {
                before.append((clientId, SyncedEdits.Element(documentId: previous.path.id, body: [:])))
            }
        }
        let writes = try SyncedEdits.writes(before: before, after: after, changed: changed, in: collection)
        // Every write is checked before any piece is queued: a refused piece would leave the
        // pieces before it queued while the edit reads as not made.
        for write in writes { try write.validate() }
        var tickets: [WriteTicket] = []
        // One atomic batch per edit, in pieces of the most a batch may hold.
        var start = 0
        while start < writes.count {
            let piece = Array(writes[start..<min(start + 500, writes.count)])
            tickets.append(try core.enqueueBatch(piece, epoch: state.space) { [weak self] in self?.engineChanged() })
            start += piece.count
        }
        for (clientId, element) in known {
            state.known[clientId] = element
            if state.clientIds[element.path.id] != clientId { state.clientIds[element.path.id] = clientId }
        }
        for clientId in removed { state.known.removeValue(forKey: clientId) }
        // In order already unless something moved, came or changed an order field.
        state.value = reordered ? Self.ordered(value, known: state.known, order: state.order) : value
        if reordered { state.aligned = nil }
        let touchedIds = Set(known.keys).union(removed)
        state.pending += tickets.map { PendingEdit(ticket: $0, touched: touchedIds) }
        state.submitted += tickets.count
        return tickets
    }

    /// Reports a queued edit that could not be stored (the engine rolled it back) as `lastError`.
    /// Refusals by the server, which may come long after (an edit made offline), are taken from
    /// the engine's rejected writes as they come.
    private func watch(_ ticket: WriteTicket) {
        Task { [weak self] in
            guard let error = await ticket.recorded(), let self else { return }
            self.set(.lastError) { $0.lastError = error }
        }
    }

    // MARK: The engine's view

    private func engineChanged() {
        var changes = refresh() ? SyncedChanges.value : []
        changes.insert(.hasPendingWrites)
        // A refusal for good: the engine rolled the edit back; the store says why.
        let rejected = core.rejectedWrites
        let reported = state.withLock { state -> Bool in
            defer { state.rejectedSeen = rejected.count }
            guard rejected.count > state.rejectedSeen, let last = rejected.last else { return false }
            state.lastError = last.error
            return true
        }
        if reported { changes.insert(.lastError) }
        changed(changes)
    }

    /// Takes the engine's view as the value, unless an edit is queued and not in it yet (the edit's
    /// own recording refreshes again). Elements keep their `clientId`; while the value is aligned
    /// with the engine's shown documents only those whose model changed are decoded, otherwise
    /// those whose fields changed. Returns whether it took it.
    @discardableResult
    func refresh() -> Bool {
        guard !isTesting else { return false }
        let spaceUser = core.spaceUser
        let hid = state.withLock { state -> Bool? in
            guard state.hidden(spaceUser: spaceUser) else { return nil }
            defer {
                state.value = []
                state.known = [:]
                state.aligned = nil
            }
            return !state.value.isEmpty
        }
        if let hid { return hid }
        // Nothing of the state is held while the engine's view is read: an edit meanwhile would
        // copy whatever a refresh holds a reference to.
        // The edits recorded by now are in the snapshot read next (a ticket is marked recorded
        // after the engine published the write).
        let ready = state.withLock { state in
            // An edit the engine could not store was rolled back there but is still in the
            // value (and in `known`): only the whole view, compared field by field, takes it back.
            if state.pending.contains(where: { edit in
                guard edit.ticket.isRecorded, case .notStored? = edit.ticket.currentOutcome else { return false }
                return true
            }) {
                state.aligned = nil
            }
            return (submitted: state.submitted, aligned: state.aligned, order: state.order,
                    recorded: Set(state.pending.lazy.filter(\.ticket.isRecorded).map { ObjectIdentifier($0.ticket) }), pending: state.pending.count)
        }
        let engineSnapshot = core.snapshot
        if let aligned = ready.aligned, let positions = engineSnapshot.changedShownPositions(since: aligned),
           let changed = refreshChanged(positions, of: engineSnapshot, base: aligned, recorded: ready.recorded, order: ready.order) {
            return changed
        }
        // Taken whole only when no edit is left out of it.
        guard ready.recorded.count == ready.pending else { return false }
        let shown = engineSnapshot.shownState
        let (previousKnown, previousClientIds) = state.withLock { ($0.known, $0.clientIds) }
        var values: [Value] = []
        values.reserveCapacity(shown.paths.count)
        var known: [UUID: Known] = [:]
        var clientIds = previousClientIds
        for (path, row) in zip(shown.paths, shown.models) {
            let clientId = clientIds[path.id] ?? UUID()
            clientIds[path.id] = clientId
            if let previous = previousKnown[clientId], previous.path == path, previous.fields == row.fields {
                values.append(previous.value)
                known[clientId] = previous
                continue
            }
            do {
                let value = try SyncedKeys.value(Value.self, from: row.fields, clientId: clientId, documentId: path.id)
                values.append(value)
                known[clientId] = Known(path: path, fields: row.fields, orderValues: ready.order?.orderValues(row.fields) ?? [], value: value)
            } catch {
                core.logDecodeFailure(path, error)
            }
        }
        let taken = state.withLock { state -> Bool in
            guard state.submitted == ready.submitted, !state.hidden(spaceUser: core.spaceUser),
                  engineSnapshot.generation >= state.generation else { return false }
            Self.dropRecorded(ready.recorded, from: &state)
            guard state.pending.isEmpty else { return false }
            state.generation = engineSnapshot.generation
            state.space = engineSnapshot.space
            state.value = IdentifiedArray(uniqueElements: values)
            state.known = known
            state.clientIds = clientIds
            // Aligned when every shown document decoded.
            state.aligned = values.count == shown.paths.count ? engineSnapshot : nil
            return true
        }
        return taken
    }

    /// A refresh that decodes only the shown documents at `positions` (those whose model changed
    /// since `base`, the snapshot the value is aligned with). Elements touched by an edit not in
    /// `snapshot` (not among the `recorded` when it was read) keep their value: once that edit is
    /// recorded their documents change again, and a later refresh takes them. Returns whether the
    /// value changed; nil when it does not apply (the caller takes the view whole).
    private func refreshChanged(_ positions: [Int], of snapshot: EngineSnapshot<SyncedRow>, base: EngineSnapshot<SyncedRow>,
                                recorded: Set<ObjectIdentifier>, order: CompiledQuery?) -> Bool? {
        let documents = positions.map { snapshot.shownDocument(at: $0) }
        let clientIds = state.withLock { state in documents.map { state.clientIds[$0.path.id] } }
        var updates: [(index: Int, known: Known)] = []
        for (index, (document, clientId)) in zip(positions, zip(documents, clientIds)) {
            guard let clientId,
                  let value = try? SyncedKeys.value(Value.self, from: document.model.fields, clientId: clientId, documentId: document.path.id) else { return nil }
            updates.append((index, Known(path: document.path, fields: document.model.fields, orderValues: order?.orderValues(document.model.fields) ?? [], value: value)))
        }
        return state.withLock { state -> Bool? in
            guard !state.hidden(spaceUser: core.spaceUser), snapshot.generation >= state.generation else { return false }
            guard state.aligned === base,
                  updates.allSatisfy({ $0.index < state.value.count && state.value[$0.index].clientId == $0.known.value.clientId }) else {
                state.aligned = nil
                return nil
            }
            Self.dropRecorded(recorded, from: &state)
            let kept = state.pending.reduce(into: Set<UUID>()) { $0.formUnion($1.touched) }
            state.generation = snapshot.generation
            state.space = snapshot.space
            // While an element keeps its value, the value stays aligned with `base`: the next
            // refresh looks at it again. (Its edit's own snapshot can be published before the
            // edit reads as recorded, and a change from the server to it may come meanwhile;
            // aligned past them, neither would be looked at again.)
            if !updates.contains(where: { kept.contains($0.known.value.clientId) }) { state.aligned = snapshot }
            var changed = false
            for update in updates where !kept.contains(update.known.value.clientId) {
                let value = update.known.value
                if state.value[update.index] != value {
                    state.value[id: value.clientId] = value
                    changed = true
                }
                state.known[value.clientId] = update.known
            }
            return changed
        }
    }

    /// The value in the order (its order fields, then the document path), sorted only when it is
    /// not already.
    static func ordered(_ value: IdentifiedArrayOf<Value>, known: [UUID: Known], order: CompiledQuery?) -> IdentifiedArrayOf<Value> {
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
}
