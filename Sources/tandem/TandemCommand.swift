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
            clients. Today this command runs the core library's benchmarks; the server and the \
            document commands arrive with the server.
            """,
        version: TandemVersion.current,
        subcommands: [BenchCommand.self]
    )
}
