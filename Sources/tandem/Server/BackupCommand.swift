import ArgumentParser
import Foundation
import TandemCore
import TandemServer

/// `tandem backup DEST`: a consistent copy of a server's SQLite data, taken while it runs.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the server's SQLite data to DEST, consistently, while it runs (writers are not stopped); `tandem serve --data-dir DEST` serves the copy.",
        discussion: "A PostgreSQL server is backed up with PostgreSQL's own tools (pg_dump, or a base backup)."
    )

    @Argument(help: "The directory to write the copy to (created if missing; it must hold no database yet).")
    var destination: String

    @Option(name: .customLong("data-dir"), help: "The directory the server keeps its data in.")
    var dataDirectory = "./.tandem"

    func run() async throws {
        try await reportingErrors {
            let started = ContinuousClock.now
            let version = try SQLiteServerStore.backup(directory: URL(fileURLWithPath: dataDirectory), to: URL(fileURLWithPath: destination))
            let elapsed = (ContinuousClock.now - started).doubleSeconds
            Console.out("backed up \(dataDirectory) to \(destination) at version \(version.rawValue) in \(String(format: "%.2f", elapsed)) s")
        }
    }
}
