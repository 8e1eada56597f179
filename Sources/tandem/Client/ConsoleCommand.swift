import ArgumentParser
import Foundation
import TandemCore

/// `tandem console`: prints the address of a server's web console, signed in as a chosen user
/// when given the server's secret. The token rides in the address's fragment, which a browser
/// keeps to itself: the secret never reaches the page, and the token never reaches a log.
struct ConsoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console",
        abstract: "Print the web console's address; with --as, one that signs in as that user.",
        discussion: """
            Open the address in a browser. On a server started with --auth-secret, --as mints a token \
            for the user (with the server's secret, from --secret or $TANDEM_AUTH_SECRET) and the \
            console shows what the rules let that user see.
            Example: tandem console --as ada --ttl 8h
            """
    )

    @Option(help: "The Tandem server's URL.")
    var url = "http://127.0.0.1:8080"

    @Option(name: .customLong("as"), help: "Sign in as this user (the token's `sub`).")
    var user: String?

    @Option(help: "The server's secret (default: $TANDEM_AUTH_SECRET), to mint the token with.")
    var secret: String?

    @Option(help: "How long the token is valid: seconds, or a number with s, m, h or d (default 1h).")
    var ttl = "1h"

    @Option(help: "Another claim of the token, as key=value (admin=true to read the server's metrics). Repeatable.")
    var claim: [String] = []

    func run() async throws {
        try await reportingErrors {
            Console.out(try await address())
        }
    }

    func address() async throws -> String {
        guard let base = URL(string: url), let scheme = base.scheme, ["http", "https"].contains(scheme), base.host != nil else {
            throw TandemError.invalidArgument("--url must be an http(s) URL with a host, such as http://127.0.0.1:8080; got '\(url)'.")
        }
        let console = (url.hasSuffix("/") ? String(url.dropLast()) : url) + "/console/"
        guard let user else {
            guard secret == nil, claim.isEmpty else {
                throw TandemError.invalidArgument("--secret and --claim make a token for --as; say which user to sign in as.")
            }
            return console
        }
        let token = try await TokenCommand.mint(sub: user, secret: secret, ttl: ttl, claims: claim)
        return console + "#token=" + token
    }
}
