import ArgumentParser
import TandemServer

/// `tandem openapi`: prints the HTTP API's OpenAPI 3.1 description (`docs/openapi.json`).
struct OpenAPICommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "openapi",
        abstract: "Print the HTTP API's OpenAPI 3.1 description, for the default limits (a running server serves its own at /v1/openapi.json)."
    )

    func run() throws {
        Console.out(String(OpenAPIDescription.text().dropLast()))
    }
}
