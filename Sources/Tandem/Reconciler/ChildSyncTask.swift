import Foundation
import GRDB
import TandemCore

/// Reconciles a nested collection of each parent (the rooms of each studio): the children are
/// taken from the parent's DTO, linked to their parent, updated from their own stamps, and the
/// parent's children the payload no longer lists follow the task's deletion policy, scoped to
/// that parent.
///
/// ```swift
/// let rooms = ChildSyncTask<StudioDTO, Studio, Room>(
///     extract: { $0.rooms },
///     parentColumn: Column("studioId"),
///     parentKey: { $0.id },
///     link: { room, studio in room.studioId = studio.id },
///     deletionPolicy: .hardDeleteMissing
/// )
/// try await reconciler.upsertCollection(Studio.self, from: dtos, childTasks: [AnyChildTask(rooms)])
/// ```
public struct ChildSyncTask<ParentDTO: RemoteStampedDTO, Parent: SyncableModel, Child: SyncableModel>: Sendable where Parent.DTO == ParentDTO {
    /// The key of this task's summary in ``ReconcileSummary/children``.
    public let name: String
    /// What becomes of a listed parent's children its DTO no longer lists.
    public let deletionPolicy: DeletionPolicy
    /// An empty child list keeps that parent's children (a payload that left them out).
    public let requireNonEmptyChildSlice: Bool
    let extract: @Sendable (ParentDTO) -> [Child.DTO]
    let parentColumn: Column
    let parentKey: @Sendable (Parent) -> DatabaseValue
    let link: @Sendable (inout Child, Parent) -> Void
    let children: [AnyChildTask<Child>]

    /// - Parameters:
    ///   - name: the key of its summary; the child's table name by default.
    ///   - extract: the parent DTO's children.
    ///   - parentColumn: the child's column that holds its parent's key: the parent's children
    ///     are the rows whose column equals `parentKey(parent)`. Give it an index.
    ///   - parentKey: the value of the parent that `link` stores in the child (its row id, which
    ///     a new parent has only when its record implements `didInsert`, or its `remoteId`). A nil
    ///     key for a parent with children is an error.
    ///   - link: points a child at its parent. Called on every new and updated child; a listed
    ///     child whose stored parent key differs (it moved) and whose stamp is the same is written
    ///     too. An older stamp changes nothing, its parent included.
    ///   - deletionPolicy: what becomes of a listed parent's children its DTO no longer lists.
    ///   - requireNonEmptyChildSlice: an empty child list keeps that parent's children, as a payload
    ///     that left them out (default); false deletes them by `deletionPolicy`.
    ///   - children: the child's own child tasks (children of children).
    public init(
        _ name: String = Child.databaseTableName,
        extract: @escaping @Sendable (ParentDTO) -> [Child.DTO],
        parentColumn: Column,
        parentKey: @escaping @Sendable (Parent) -> (any DatabaseValueConvertible)?,
        link: @escaping @Sendable (inout Child, Parent) -> Void,
        deletionPolicy: DeletionPolicy = .none,
        requireNonEmptyChildSlice: Bool = true,
        children: [AnyChildTask<Child>] = []
    ) {
        self.name = name
        self.extract = extract
        self.parentColumn = parentColumn
        self.parentKey = { parentKey($0)?.databaseValue ?? .null }
        self.link = link
        self.deletionPolicy = deletionPolicy
        self.requireNonEmptyChildSlice = requireNonEmptyChildSlice
        self.children = children
    }

    /// Reconciles the children of `parents` (the parents' rows, with the DTOs they came from).
    func run(parents: [Parent], dtos: [ParentDTO], in db: Database, now: Date) throws -> ReconcileSummary {
        var listed: [Child.DTO] = []
        var owners: [Int] = []
        var scopeKeys: [DatabaseValue] = []
        var ownerKeys: [DatabaseValue] = []
        ownerKeys.reserveCapacity(parents.count)
        for (index, parent) in parents.enumerated() {
            let children = extract(dtos[index])
            let key = parentKey(parent)
            if key.isNull, !children.isEmpty || deletionPolicy != .none {
                // Its children could be linked to nothing, or another parent's taken for its own.
                throw ReconcileError(table: Parent.databaseTableName, remoteId: "\(parent.remoteId)", step: .lookup, underlying: TandemError(
                    .invalidArgument, "the parent key of the \(name) task is nil for this parent; give the record `didInsert` so a new row knows its id, or key children by the parent's remote id"))
            }
            ownerKeys.append(key)
            listed += children
            owners += repeatElement(index, count: children.count)
            if !(requireNonEmptyChildSlice && children.isEmpty) {
                scopeKeys.append(key)
            }
        }
        let parentColumn = self.parentColumn
        let link = self.link
        let table = TableReconciler<Child>(
            deletionScope: deletionPolicy == .none ? nil : .keys(parentColumn, scopeKeys),
            parent: ParentLink(column: parentColumn, keys: ownerKeys, link: { child, owner in link(&child, parents[owner]) }),
            keepsRows: !children.isEmpty
        )
        return try table.reconcile(listed, owners: owners, in: db, deletionPolicy: deletionPolicy, childTasks: children, now: now)
    }
}

/// A child task of `Parent`, whatever its child type: what ``Reconciler`` and ``ChildSyncTask``
/// take in `childTasks` and `children`.
public struct AnyChildTask<Parent: SyncableModel>: Sendable {
    /// The wrapped task's name: the key of its summary in `ReconcileSummary.children`.
    public let name: String
    let run: @Sendable ([Parent], [Parent.DTO], Database, Date) throws -> ReconcileSummary

    /// Wraps `task`, whatever its child type.
    public init<Child: SyncableModel>(_ task: ChildSyncTask<Parent.DTO, Parent, Child>) {
        name = task.name
        run = { parents, dtos, db, now in try task.run(parents: parents, dtos: dtos, in: db, now: now) }
    }
}
