import Foundation
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// A schema-driven fuzz run: schemathesis (from PyPI) reads `/v1/openapi.json` from a live server,
/// sends requests made from it, valid and not, and checks every answer: no 5xx, every status and
/// body as described, invalid input refused. A small budget by default; more on demand:
///
/// ```sh
/// TANDEM_SCHEMATHESIS_EXAMPLES=50 TANDEM_SCHEMATHESIS_PHASES=coverage,fuzzing,stateful swift test --filter SchemathesisTests
/// ```
///
/// `positive_data_acceptance` is left out: the schema cannot say everything that makes a request
/// valid (a cursor's values per order, a path's depth and segment bytes, a document's size), so
/// some requests it allows are rightly refused.
///
/// Skipped, saying why, where schemathesis is not installed, unless `TANDEM_REQUIRE_SCHEMATHESIS`
/// is set (CI sets it).
@Suite("Schemathesis", .serialized, .enabled(if: Schemathesis.runs, "schemathesis is not installed: pip install schemathesis==\(Schemathesis.version) to run the schema-driven fuzz"),
       .timeLimit(.minutes(10)))
struct SchemathesisTests {
    @Test("an open server: no 5xx, and every answer as described")
    func openServer() async throws {
        let server = try await LiveServer.start()
        let result = try await Schemathesis.run(against: server.url, headers: [], seed: 1)
        await server.stop()
        #expect(result.status == 0, "schemathesis found problems:\n\(result.output)")
        Schemathesis.expectEveryOperationTested(result.output)
    }

    @Test("a secured server, with an operator's token and rules that let it read and write everything: no 5xx, and every answer as described")
    func securedServer() async throws {
        let tokens = try await BearerTokens(secret: "the-schemathesis-secret-long-enough")
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens, rules: try AccessRules(parsing: """
            rules:
              - match: "{rest=**}"
                read: auth.token.admin == true
                write: auth.token.admin == true
            """))
        let server = try await LiveServer.start(configuration: configuration)
        let token = try tokens.mint(subject: "ops", claims: ["admin": true])
        let result = try await Schemathesis.run(against: server.url, headers: ["Authorization: Bearer \(token)"], seed: 2)
        await server.stop()
        #expect(result.status == 0, "schemathesis found problems:\n\(result.output)")
        Schemathesis.expectEveryOperationTested(result.output)
    }
}

enum Schemathesis {
    /// The version `.ci/run` installs.
    static let version = "4.32.5"

    /// The `st` program on PATH.
    static var executable: URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        return path.split(separator: ":").map { URL(filePath: "\($0)/st") }.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    static var runs: Bool {
        executable != nil || ProcessInfo.processInfo.environment["TANDEM_REQUIRE_SCHEMATHESIS"] != nil
    }

    /// Every operation of the description was tested: none skipped, none failing a health check.
    static func expectEveryOperationTested(_ output: String) {
        func number(after label: String) -> String? {
            output.range(of: label).map { String(output[$0.upperBound...].prefix { $0.isNumber || $0 == "/" }) }
        }
        let selected = number(after: "Selected: ")?.split(separator: "/").map(String.init) ?? []
        #expect(selected.count == 2 && selected[0] == selected[1] && number(after: "Tested: ") == selected.first && !output.contains("Failed Health Check"),
                "not every operation was tested:\n\(output)")
    }

    /// Runs schemathesis against the server at `url` and returns its exit status and output.
    static func run(against url: URL, headers: [String], seed: Int) async throws -> (status: Int32, output: String) {
        guard let executable else {
            throw TandemError(.unavailable, "schemathesis is not installed: pip install schemathesis==\(version)")
        }
        let environment = ProcessInfo.processInfo.environment
        let examples = environment["TANDEM_SCHEMATHESIS_EXAMPLES"] ?? "5"
        // The coverage phase tries each parameter's edges (empty, too long, past int64, other
        // types, undeclared methods) once; fuzzing draws the rest.
        let phases = environment["TANDEM_SCHEMATHESIS_PHASES"] ?? "coverage,fuzzing"
        let base = url.absoluteString.hasSuffix("/") ? String(url.absoluteString.dropLast()) : url.absoluteString
        var arguments = [
            "run", "\(base)/v1/openapi.json", "--url", base,
            "--checks", "all", "--exclude-checks", "positive_data_acceptance",
            // No filter_too_much: every operation's parameters must be ones a fuzzer can make (the
            // four document operations were skipped as filtered out until their path parameters
            // held no `/`).
            "--suppress-health-check", "too_slow",
            "--max-examples", examples, "--phases", phases, "--seed", String(seed),
            "--workers", "1", "--generation-database", "none", "--no-color",
            // The suite shares two cores with every other test: an answer can take seconds. A
            // request unanswered for two minutes is a hang, and fails the run.
            "--request-timeout", "120",
        ]
        for header in headers { arguments += ["--header", header] }
        let process = ChildSpawn()
        process.executableURL = executable
        process.arguments = arguments
        // The report directory schemathesis may write goes to a temporary one.
        process.currentDirectoryURL = FileManager.default.temporaryDirectory
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let collected = Collector(output.fileHandleForReading)
        let exited = Exit()
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        try process.run()
        let status = await exited.wait()
        return (status, await collected.text())
    }
}
