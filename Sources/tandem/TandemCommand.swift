import ArgumentParser
import TandemCore

/// The `tandem` command line.
@main
struct TandemCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tandem",
        abstract: "Real-time data sync for Swift: sync server, client tools and benchmarks.",
        discussion: """
            Tandem keeps documents in sync between a self-hostable server and offline-first Swift clients.
            Today this command runs the benchmarks of the core library; the server and the document
            commands (serve, demo, get, set, query, watch…) arrive with the server.
            """,
        version: TandemVersion.current,
        subcommands: [BenchCommand.self]
    )
}
