import ArgumentParser
import Foundation
import TandemCore
import TandemServer

/// `tandem token`: mints a bearer token for development.
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Mint an HS256 bearer token for a server started with --auth-secret (for development).",
        discussion: "Example: tandem token --sub ada --secret \"$TANDEM_AUTH_SECRET\" --ttl 1h --claim role=editor --claim admin=true"
    )

    @Option(help: "The user id (the `sub` claim).")
    var sub: String

    @Option(help: "The server's secret (default: $TANDEM_AUTH_SECRET).")
    var secret: String?

    @Option(help: "How long the token is valid: seconds, or a number with s, m, h or d (default 1h); 0 for a token that never expires.")
    var ttl = "1h"

    @Option(help: "Another claim, as key=value; the value is read as JSON when it is JSON (true, 3, \"x\"), else as text. Repeatable.")
    var claim: [String] = []

    func run() async throws {
        try await reportingErrors {
            Console.out(try await Self.mint(sub: sub, secret: secret, ttl: ttl, claims: claim))
        }
    }

    /// A token for `sub`, signed with `secret` (or `$TANDEM_AUTH_SECRET`), valid for `ttl`, with
    /// the `key=value` claims given.
    static func mint(sub: String, secret: String?, ttl: String, claims entries: [String]) async throws -> String {
        guard let secret = secret ?? ProcessInfo.processInfo.environment["TANDEM_AUTH_SECRET"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            throw TandemError.invalidArgument("Give the server's secret with --secret or TANDEM_AUTH_SECRET.")
        }
        let lifetime = try duration(ttl)
        var claims: JSONObject = [:]
        for entry in entries {
            guard let equals = entry.firstIndex(of: "="), equals != entry.startIndex else {
                throw TandemError.invalidArgument("--claim takes key=value; got '\(entry)'.")
            }
            let key = String(entry[..<equals])
            let text = String(entry[entry.index(after: equals)...])
            guard !["sub", "exp", "iat"].contains(key) else {
                throw TandemError.invalidArgument("--claim \(key) is set by the command itself; use --sub or --ttl.")
            }
            claims[key] = (try? JSONText.parse(text)) ?? .string(text)
        }
        let tokens = try await BearerTokens(secret: secret)
        return try tokens.mint(subject: sub, lifetime: lifetime, claims: claims)
    }

    /// `90`, `90s`, `15m`, `1h`, `2d`; nil for `0`.
    static func duration(_ text: String) throws(TandemError) -> Duration? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        var number = Substring(text)
        var unit: Int64 = 1
        if let last = text.last, let seconds = units[last] {
            unit = seconds
            number = number.dropLast()
        }
        guard let value = Int64(number), value >= 0, value <= Int64.max / unit / 2 else {
            throw TandemError.invalidArgument("--ttl takes seconds or a number with s, m, h or d, such as 90, 15m or 1h; got '\(text)'.")
        }
        return value == 0 ? nil : .seconds(value * unit)
    }
}
