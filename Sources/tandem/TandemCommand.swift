import ArgumentParser
import TandemCore

/// The `tandem` command line.
@main
struct TandemCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tandem",
        abstract: "Real-time data sync for Swift: sync server, client tools and benchmarks.",
        discussion: """
            Tandem keeps documents in sync between a self-hostable server and offline-first Swift \
            clients. `tandem serve` runs the server; the other commands talk to one (--url, default \
            http://127.0.0.1:8080).
            """,
        version: TandemVersion.current,
        subcommands: [
            ServeCommand.self, DemoCommand.self, GetCommand.self, SetCommand.self, UpdateCommand.self, DeleteCommand.self,
            QueryCommand.self, WatchCommand.self, ImportCommand.self, ExportCommand.self, TokenCommand.self, ConsoleCommand.self, OpenAPICommand.self, RulesCommand.self, BackupCommand.self, BenchCommand.self,
        ]
    )
}
