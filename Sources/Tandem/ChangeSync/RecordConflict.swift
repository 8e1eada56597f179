import TandemCore

/// A modification the server refused because the record changed there after the version it was
/// based on: the record as this engine last had it from the server (`base`, nil when it never
/// had it), as the app changed it (`client`), and as the server has it now (`server`).
public struct RecordConflict: Sendable, Hashable {
    /// The record as this engine last had it from the server; nil when it never had it.
    public let base: SyncedRecord?
    /// The record as the app changed it: the change the server refused.
    public let client: SyncedRecord
    /// The record as the server has it now.
    public let server: SyncedRecord

    /// A conflict from its three records.
    public init(base: SyncedRecord?, client: SyncedRecord, server: SyncedRecord) {
        self.base = base
        self.client = client
        self.server = server
    }
}

/// Chooses the record a conflict ends with. The engine sends it on top of the server's version:
/// its properties are the record's whole state (a property it lacks is cleared). Nil leaves the
/// conflict unresolved, and the engine halts with it.
///
/// ```swift
/// let resolver = ConflictResolver { conflict in
///     var merged = conflict.server
///     merged.properties["title"] = conflict.client.properties["title"]   // our titles win
///     return merged
/// }
/// ```
public struct ConflictResolver: Sendable {
    private let choose: @Sendable (RecordConflict) -> SyncedRecord?

    /// A resolver that asks `resolve` for the record each conflict ends with (nil: unresolved).
    public init(_ resolve: @escaping @Sendable (RecordConflict) -> SyncedRecord?) {
        choose = resolve
    }

    /// The record `conflict` ends with by this resolver's rule; nil leaves it unresolved. A
    /// delegate that decides some conflicts itself hands the others to the configured one:
    ///
    /// ```swift
    /// func syncEngine(_ engine: ChangeSyncEngine, shouldResolveConflict conflict: RecordConflict) -> SyncedRecord? {
    ///     guard conflict.client.type == "Note" else { return engine.configuration.resolver.resolve(conflict) }
    ///     …
    /// }
    /// ```
    public func resolve(_ conflict: RecordConflict) -> SyncedRecord? {
        choose(conflict)
    }

    /// Each property from the side that changed it last, by its hybrid-logical-clock stamp (wall
    /// time, counter, then node id): two devices that meet the same conflict choose the same
    /// record, whatever their clocks' skew. A property with no stamp on either side loses to one
    /// with a stamp; with none on both, the server's stays.
    public static let fieldLevelLastWriterWins = ConflictResolver { conflict in
        FieldMerge.lastWriterWins(client: conflict.client, server: conflict.server)
    }

    /// The app's change, whole, over whatever the server has.
    public static let clientWins = ConflictResolver { conflict in conflict.client }

    /// The server's record: the app's change is dropped (the app hears of it as a fetched change).
    public static let serverWins = ConflictResolver { conflict in conflict.server }
}

/// Field-level merges, as pure functions.
enum FieldMerge {
    static func lastWriterWins(client: SyncedRecord, server: SyncedRecord) -> SyncedRecord {
        var merged = server
        let names = Set(client.properties.keys).union(server.properties.keys)
            .union(client.metadata.stamps.keys).union(server.metadata.stamps.keys)
        for name in names {
            let mine = client.metadata.stamps[name]
            let theirs = server.metadata.stamps[name]
            let clientWins: Bool
            switch (mine, theirs) {
            case (let mine?, let theirs?): clientWins = mine > theirs
            case (_?, nil): clientWins = true
            case (nil, _): clientWins = false
            }
            if clientWins {
                merged.properties[name] = client.properties[name]
                merged.metadata.stamps[name] = mine
            }
        }
        merged.type = client.type
        return merged
    }
}
