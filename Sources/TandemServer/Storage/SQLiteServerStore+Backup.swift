import Foundation
import GRDB
import TandemCore

extension SQLiteServerStore {
    /// Copies the database in `directory` (`tandem.sqlite`, as ``init(directory:configuration:)``
    /// keeps it), whether a server is running on it or not, into `destination`, which
    /// `tandem serve --data-dir destination` then serves as it was.
    ///
    /// The copy is SQLite's online backup, taken in one step inside one read: it is the database as
    /// of one commit, every commit before it whole and none after it. In WAL mode a read blocks no
    /// writer, so a running server goes on committing while it is taken.
    ///
    /// ```swift
    /// let version = try SQLiteServerStore.backup(directory: URL(filePath: ".tandem"), to: URL(filePath: "backups/monday"))
    /// ```
    ///
    /// - Returns: the version of the newest commit the copy holds.
    /// - Throws: `not-found` when `directory` holds no database, `already-exists` when
    ///   `destination` holds one (a backup never overwrites), `unavailable` when either cannot be
    ///   opened or written.
    @discardableResult
    public static func backup(directory: URL, to destination: URL) throws(TandemError) -> Version {
        let source = directory.appendingPathComponent("tandem.sqlite").path
        let target = destination.appendingPathComponent("tandem.sqlite").path
        guard FileManager.default.fileExists(atPath: source) else {
            throw TandemError(.notFound, "No database at \(source): give the --data-dir the server runs with.")
        }
        guard !FileManager.default.fileExists(atPath: target) else {
            throw TandemError(.alreadyExists, "\(target) exists already; a backup never overwrites one. Choose a new destination.")
        }
        do {
            try FileManager.default.createDirectory(at: destination, withIntermediateDirectories: true)
        } catch {
            throw TandemError(.unavailable, "Cannot create \(destination.path): \(describeFileError(error)). Choose a destination this user can write.", cause: error)
        }
        do {
            // A pool: its reads run in WAL snapshots, which a running server's writers go past.
            let pool = try DatabasePool(path: source)
            let copy = try DatabaseQueue(path: target)
            try pool.backup(to: copy)
            let version = try copy.read(SQLiteServerStore.newestVersion)
            try copy.close()
            try pool.close()
            return version
        } catch {
            try? FileManager.default.removeItem(atPath: target)
            throw TandemError(.unavailable, "The backup of \(source) to \(target) failed: \(error). Nothing was left at the destination; try again.", cause: error)
        }
    }
}
