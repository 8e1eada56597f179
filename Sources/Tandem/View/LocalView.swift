import Foundation
import TandemCore

/// The documents an engine shows: the server's last confirmed state (`base`) with the pending
/// writes of the outbox applied on top, per document. A pure value; the engine owns one under a lock.
struct LocalView: Sendable {
    private(set) var base: [DocumentPath: Document] = [:]
    private(set) var outbox: Outbox
    /// The outbox's entries again, in a list readers can share at little cost to the next change
    /// (a flat array shared with them would be copied whole by the next write). Kept in step with
    /// `outbox` by every change of it here.
    private(set) var entries: ChunkedList<PendingWrite>
    /// The view: base plus pending writes.
    private(set) var documents: [DocumentPath: Document] = [:]
    /// The outbox entries that write each document, in outbox order (their ids and mutations): a
    /// document's view is rebuilt from its own entries without walking the whole outbox.
    /// A slice, so that the oldest leaves in constant time; changed in place, never copied out.
    private var pending: [DocumentPath: ArraySlice<Pending>] = [:]
    /// Pending writes the listener has already seen committed (their echo, recognized by mutation
    /// id): the base includes them, so the view must not apply them again. They leave the outbox
    /// with their acknowledgement.
    private var confirmed: Set<MutationID> = []
    /// The version at which a document left the base outside the listener (an acknowledged
    /// delete, a read that found it gone): listener news older than that is not taken, or a
    /// listener still catching up would bring the deleted document back until its delete arrived.
    /// Cleared once the listener brings news of that version or later.
    private var tombstones: [DocumentPath: Version] = [:]

    init(base: [Document], outbox: Outbox, now: Date) {
        self.outbox = outbox
        entries = ChunkedList(outbox.entries)
        self.base.reserveCapacity(base.count)
        for document in base { self.base[document.path] = document }
        documents = self.base
        for entry in outbox.entries { pending[entry.path, default: []].append(Pending(entry)) }
        for path in pending.keys { recompute(path, now: now) }
    }

    /// An outbox entry as the view applies it.
    private struct Pending: Sendable {
        let id: MutationID
        let mutation: Mutation
        init(_ entry: PendingWrite) {
            id = entry.id
            mutation = entry.mutation
        }
    }

    func hasPendingWrites(_ path: DocumentPath) -> Bool { pending[path] != nil }

    var hasPendingWrites: Bool { !outbox.isEmpty }

    /// Rebuilds one document of the view from its base and its pending writes. Returns whether the
    /// view of it changed.
    @discardableResult
    mutating func recompute(_ path: DocumentPath, now: Date) -> Bool {
        guard let entries = pending[path] else {
            // No pending write: the view is the base (the common case, and a snapshot's).
            let document = base[path]
            let old = document.map { documents.updateValue($0, forKey: path) } ?? documents.removeValue(forKey: path)
            return old != document
        }
        var document = base[path]
        for entry in entries where confirmed.isEmpty || !confirmed.contains(entry.id) {
            document = Self.applyLocally(entry.mutation, to: document, now: now)
        }
        let old = documents[path]
        documents[path] = document
        return old != document
    }

    /// A pending write as the local view shows it: optimistic, without preconditions; an update of
    /// a document the view does not have shows nothing, as the server would refuse it.
    static func applyLocally(_ mutation: Mutation, to document: Document?, now: Date) -> Document? {
        if case .update = mutation.kind, document == nil { return nil }
        guard let body = mutation.applyToBody(document?.data, serverTime: ServerTime(now)) else { return nil }
        return Document(path: mutation.path, data: body, version: document?.version ?? .zero,
                        createTime: document?.createTime ?? now, updateTime: now)
    }

    /// Whether a snapshot would become the view as it is: no base yet, and nothing pending.
    var takesSnapshotWhole: Bool { base.isEmpty && documents.isEmpty && pending.isEmpty }

    /// Applies a listener batch to the base. Returns the paths whose view changed, each once, in
    /// the batch's order where it has them (a snapshot's is path order).
    mutating func applyRemote(_ batch: RemoteChangeBatch, now: Date) -> [DocumentPath] {
        if batch.isSnapshot && base.isEmpty && documents.isEmpty && pending.isEmpty && tombstones.isEmpty {
            // A first snapshot with nothing pending: the view is the snapshot itself.
            base.reserveCapacity(batch.changes.count)
            // By index, so only each document is copied, not each change; each path is hashed
            // once, and an older repeat (never sent by the server) puts the newer one back.
            let changes = batch.changes
            for index in changes.indices {
                guard let document = changes[index].document else { continue }
                if let current = base.updateValue(document, forKey: changes[index].path), current.version > document.version {
                    base[changes[index].path] = current
                }
            }
            documents = base
            // Every change a distinct document (as the server sends them): the batch's paths are the changed ones.
            return base.count == batch.changes.count ? batch.changes.map(\.path) : Array(base.keys)
        }
        var touched = Set<DocumentPath>()
        var order: [DocumentPath] = []
        touched.reserveCapacity(batch.changes.count)
        order.reserveCapacity(batch.changes.count)
        if batch.isSnapshot && !base.isEmpty {
            let incoming = Set(batch.changes.map(\.path))
            for path in base.keys where !incoming.contains(path) {
                base[path] = nil
                touched.insert(path)
                order.append(path)
            }
        }
        if batch.changes.count > 64 {
            base.reserveCapacity(base.count + batch.changes.count)
            documents.reserveCapacity(documents.count + batch.changes.count)
        }
        var settled = Set<DocumentPath>()
        for change in batch.changes {
            if let gone = tombstones[change.path] {
                if change.version < gone { continue }  // older than the delete the view has
                tombstones[change.path] = nil
            }
            if let current = base[change.path] {
                if current.version > change.version { continue }  // older news
                // The echo of a commit the view already has, such as our own acknowledged write.
                if current.version == change.version && current == change.document { continue }
            }
            if let id = change.mutationID, let echoed = echo(of: id, change, now: now) {
                // Our own pending write, committed: the view already shows it.
                base[change.path] = change.document
                if echoed {
                    settled.insert(change.path)
                } else if touched.insert(change.path).inserted {
                    order.append(change.path)
                }
                continue
            }
            base[change.path] = change.document
            if touched.insert(change.path).inserted { order.append(change.path) }
        }
        return order.filter { (settled.isEmpty || !settled.contains($0)) && recompute($0, now: now) }
    }

    /// Recognizes a listener change as the commit of one of our pending writes. Returns nil when it
    /// is not ours; true when the view needs no rebuild (the write was the oldest unconfirmed one for
    /// the document and the server computed what the view assumed); false when it must be rebuilt.
    ///
    /// The change names the last of our writes the commit applied to the document. The server
    /// applies a client's writes in order, so every earlier pending write to it is in that
    /// document too (applied, or refused and in it as nothing): all of them are confirmed, or a
    /// batch that wrote the document twice would show its first write applied twice.
    private mutating func echo(of id: MutationID, _ change: RemoteChange, now: Date) -> Bool? {
        guard id.clientID == outbox.clientID, let entries = pending[change.path],
              let entry = entries.first(where: { $0.id == id })
        else { return nil }
        let included = entries.filter { $0.id.sequence <= id.sequence && !confirmed.contains($0.id) }
        let oldest = entries.first { !confirmed.contains($0.id) }
        let assumed = Self.applyLocally(entry.mutation, to: base[change.path], now: now)
        for earlier in included { confirmed.insert(earlier.id) }
        return included.count == 1 && oldest?.id == id && assumed?.data == change.document?.data
    }

    /// Replaces the base of one document (a fetch or an acknowledgement) unless it is older.
    @discardableResult
    mutating func setBase(_ document: Document?, at path: DocumentPath, version: Version, now: Date) -> Bool {
        if let current = base[path], current.version > version { return recompute(path, now: now) }
        if let gone = tombstones[path], gone > version { return recompute(path, now: now) }
        base[path] = document
        tombstones[path] = document == nil ? version : nil
        return recompute(path, now: now)
    }

    /// Removes every document from the base (pending writes stay).
    mutating func clearBase(now: Date) {
        let paths = Set(base.keys)
        base.removeAll()
        tombstones.removeAll()
        for path in paths { recompute(path, now: now) }
    }

    mutating func enqueue(_ mutation: Mutation, now: Date) -> Outbox.Enqueued {
        let result = outbox.enqueue(mutation)
        switch result {
        case .appended(let entry):
            pending[mutation.path, default: []].append(Pending(entry))
            entries.append(entry)
        case .merged(let entry):
            // The newest entry, so the last of its document's.
            pending[mutation.path]![pending[mutation.path]!.endIndex - 1] = Pending(entry)
            entries[entries.count - 1] = entry
        }
        // The view already holds every earlier pending write; a merge means the same as applying
        // the two writes in turn, so applying just the new one on top is exact.
        documents[mutation.path] = Self.applyLocally(mutation, to: documents[mutation.path], now: now)
        return result
    }

    /// Queues an atomic batch: every write shows at once, in order.
    mutating func enqueue(batch mutations: [Mutation], now: Date) -> [PendingWrite] {
        let added = outbox.enqueue(batch: mutations)
        for entry in added {
            entries.append(entry)
            pending[entry.path, default: []].append(Pending(entry))
            documents[entry.path] = Self.applyLocally(entry.mutation, to: documents[entry.path], now: now)
        }
        return added
    }

    /// Records that the first `count` entries were sent.
    mutating func markAttempted(first count: Int) {
        outbox.markAttempted(first: count)
        for index in 0..<min(count, entries.count) { entries[index].attempts += 1 }
    }

    /// Takes an entry out of the outbox and of `entries`.
    private mutating func removeFromOutbox(_ id: MutationID) -> PendingWrite? {
        guard let index = outbox.entries.firstIndex(where: { $0.id == id }) else { return nil }
        entries.remove(at: index - outbox.entries.startIndex)
        return outbox.remove(id)
    }

    /// Takes an entry that left the outbox out of its document's list.
    private mutating func forget(_ entry: PendingWrite) {
        guard let index = pending[entry.path]?.firstIndex(where: { $0.id == entry.id }) else { return }
        if index == pending[entry.path]!.startIndex {
            pending[entry.path]!.removeFirst()
        } else {
            pending[entry.path]!.remove(at: index)
        }
        if pending[entry.path]!.isEmpty { pending[entry.path] = nil }
    }

    /// Records an acknowledged write: the server's result becomes the base, the entry leaves the
    /// outbox. When the server computed what the view had assumed (no server timestamps, no
    /// concurrent change), the view stays as it is without replaying the remaining pending writes.
    ///
    /// Returns whether the view's data of the document changed: when it did not (the server
    /// computed what the view showed), its decoded model stands as it is.
    @discardableResult
    mutating func acknowledge(_ entry: PendingWrite, result: Document?, version: Version, now: Date) -> Bool {
        let assumed = Self.applyLocally(entry.mutation, to: base[entry.path], now: now)
        let isFirstForPath = pending[entry.path]?.first?.id == entry.id
        let before = documents[entry.path]
        guard removeFromOutbox(entry.id) != nil else { return false }
        forget(entry)
        if confirmed.remove(entry.id) != nil {
            // The listener brought this commit first: the base and the view already include it.
            if pending[entry.path] == nil { recompute(entry.path, now: now) }
        } else if let current = base[entry.path], current.version > version {
            recompute(entry.path, now: now)
        } else {
            base[entry.path] = result
            tombstones[entry.path] = result == nil ? version : nil
            if isFirstForPath, assumed?.data == result?.data {
                // The view showed exactly this: with nothing after it, it now shows the server's
                // document; otherwise it stays as it is. Its data is the same either way.
                if pending[entry.path] == nil { documents[entry.path] = result }
                return false
            }
            recompute(entry.path, now: now)
        }
        return documents[entry.path]?.data != before?.data
    }

    /// Takes an entry out of the outbox (acknowledged or rejected) and rebuilds its document.
    @discardableResult
    mutating func removeEntry(_ id: MutationID, now: Date) -> PendingWrite? {
        guard let entry = removeFromOutbox(id) else { return nil }
        confirmed.remove(id)
        forget(entry)
        recompute(entry.path, now: now)
        return entry
    }
}
