import Foundation
import GRDB

/// A record as a server sends it: an id and the time it last changed. The reconciler updates a
/// local row only from a strictly newer stamp.
public protocol RemoteStampedDTO: Sendable {
    /// The type of the record's id, as the model's `remoteIDColumn` stores it.
    associatedtype ID: Hashable & Sendable & DatabaseValueConvertible
    /// The record's id on the server.
    var id: ID { get }
    /// When the record last changed: a row is updated only from a strictly newer stamp (to the
    /// millisecond).
    var updatedAt: Date { get }
}

/// A row of the app's own GRDB table that mirrors a server record: it is found by `remoteId`,
/// made from a DTO the first time, and updated from newer ones.
///
/// ```swift
/// struct Studio: Codable, FetchableRecord, MutablePersistableRecord, SyncableModel {
///     var id: Int64?
///     var remoteId: String
///     var name: String
///     var updatedAt: Date
///
///     init(dto: StudioDTO) { remoteId = dto.id; name = dto.name; updatedAt = dto.updatedAt }
///     mutating func apply(_ dto: StudioDTO) { name = dto.name }
///     mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
/// }
/// ```
public protocol SyncableModel: FetchableRecord, MutablePersistableRecord, Sendable {
    /// The server's form of the record this row mirrors.
    associatedtype DTO: RemoteStampedDTO
    /// The column holding `remoteId`; `remoteId` by default. Make it unique: the reconciler looks
    /// rows up, and deletes missing ones, by it. It must hold the DTO's id type.
    static var remoteIDColumn: Column { get }
    /// The column holding `updatedAt`; `updatedAt` by default.
    static var updatedAtColumn: Column { get }
    /// The id of the server record this row mirrors (its DTO's `id`), stored in `remoteIDColumn`.
    var remoteId: DTO.ID { get }
    /// Stored as GRDB stores a `Date` by default (text to the millisecond; a number of seconds
    /// since 1970 reads too); another `databaseDateEncodingStrategy` is not supported.
    var updatedAt: Date { get set }
    /// A new row for a DTO whose id has none.
    init(dto: DTO)
    /// Takes a newer DTO's fields (the reconciler sets `updatedAt` itself). A throw rolls the
    /// whole reconciliation back.
    mutating func apply(_ dto: DTO) throws
}

extension SyncableModel {
    public static var remoteIDColumn: Column { Column("remoteId") }
    public static var updatedAtColumn: Column { Column("updatedAt") }
}

/// A row that is marked deleted (a tombstone) rather than removed, under `.softDeleteMissing`.
public protocol SoftDeletable: SyncableModel {
    /// The column holding `deletedAt`; `deletedAt` by default.
    static var deletedAtColumn: Column { get }
    /// When the row was marked deleted; nil while it is live. The reconciler sets it to its `now`
    /// for a row the payload no longer lists, and clears it when the record comes back with a newer
    /// stamp.
    var deletedAt: Date? { get set }
}

extension SoftDeletable {
    public static var deletedAtColumn: Column { Column("deletedAt") }
}

/// What becomes of local rows, within the deletion scope, that a payload does not list.
public enum DeletionPolicy: Sendable, Hashable {
    /// They stay (a partial payload: a page, a delta).
    case none
    /// They are deleted (the payload is the full slice).
    case hardDeleteMissing
    /// They get `deletedAt` (the payload is the full slice; the rows stay as tombstones). On a
    /// record that is not ``SoftDeletable`` they are deleted, and the summary says so.
    case softDeleteMissing
}
