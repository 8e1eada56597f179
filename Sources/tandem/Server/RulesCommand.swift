import ArgumentParser
import Foundation
import TandemCore
import TandemServer

/// `tandem rules`: works with access rules files.
struct RulesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules",
        abstract: "Work with access rules files (`tandem serve --rules FILE`).",
        subcommands: [Check.self]
    )

    /// `tandem rules check FILE`: parses a rules file as the server would.
    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Check a rules file: prints how many rules it holds, or each error's line and column (exit 1)."
        )

        @Argument(help: "The rules file, YAML or JSON.")
        var file: String

        func run() async throws {
            do {
                let rules = try AccessRules(contentsOfFile: file)
                Console.out("\(file): \(rules.count) rule\(rules.count == 1 ? "" : "s"), valid")
            } catch {
                // Each error on a line of its own.
                for line in error.message.split(separator: "\n") { Console.error("error: \(line)") }
                throw ExitCode(1)
            }
        }
    }
}
