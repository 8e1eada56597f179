import TandemCore

/// What a store's collection listing shares: picking the collections directly under a parent out
/// of collection paths, and sorting ids the way every store does (by their UTF-8 bytes).
public enum CollectionListing {
    /// The path prefix of the collections directly under `parent` ("" at the root).
    public static func prefix(of parent: DocumentPath?) -> String {
        parent.map { $0.description + "/" } ?? ""
    }

    /// The id of `collection` when it lies directly under the parent whose ``prefix(of:)`` is
    /// `prefix`; nil otherwise.
    /// Compared byte by byte, not by `Character`s (a `/` and a combining mark after it are one).
    public static func directChild(_ collection: some StringProtocol, prefix: String) -> String? {
        guard collection.utf8.starts(with: prefix.utf8) else { return nil }
        let rest = collection.utf8.dropFirst(prefix.utf8.count)
        guard !rest.isEmpty, !rest.contains(UInt8(ascii: "/")) else { return nil }
        return String(decoding: rest, as: UTF8.self)
    }

    /// `ids` without repeats, in the order of their UTF-8 bytes.
    public static func sorted(_ ids: some Sequence<String>) -> [String] {
        Set(ids).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }
}
