import Foundation
import TandemTesting
import Testing

/// The README's client example as an app copies it: a package of its own, next to this one,
/// depending on it by path as the README says (`.package(path: "../tandem")`, the `Tandem`
/// product), whose `main.swift` is the README's `TandemClient` block as written, with the app's own
/// `Todo` model. It must build.
///
/// The package builds Tandem and what it depends on from nothing, in a scratch directory of its
/// own (minutes), so it runs where `TANDEM_README_PACKAGE` is set: `.ci/run` runs it after the
/// suite, alone. Elsewhere it is skipped, saying so.
@Suite("README as an app builds it", .enabled(if: ProcessInfo.processInfo.environment["TANDEM_README_PACKAGE"] != nil,
                                              "builds a package of its own from nothing (minutes): TANDEM_README_PACKAGE=1 swift test --filter ReadmePackageTests"),
       .timeLimit(.minutes(30)))
struct ReadmePackageTests {
    static let repository = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The README's first Swift block after `heading`.
    static func block(after heading: String) throws -> String {
        let readme = try String(contentsOf: repository.appendingPathComponent("README.md"), encoding: .utf8)
        let section = try #require(readme.range(of: heading))
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "\n```", range: start.upperBound..<readme.endIndex))
        return String(readme[start.upperBound..<end.lowerBound])
    }

    @Test("a package depending on this one by path, with the README's TandemClient block as its main.swift, builds")
    func clientExampleBuilds() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-readme-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        // The dependency is named by its folder, as `../tandem` names it in the README.
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: directory.appendingPathComponent("tandem"), withDestinationURL: Self.repository)
        let app = directory.appendingPathComponent("app")
        try FileManager.default.createDirectory(at: app.appendingPathComponent("Sources/App"), withIntermediateDirectories: true)
        let readme = try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains(#".package(path: "../tandem"),"#) && readme.contains(#".product(name: "Tandem", package: "tandem"),"#),
                "the README's package setup is not the one this test copies")
        try """
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "app",
                platforms: [.macOS(.v15)],
                dependencies: [
                    .package(path: "../tandem"),
                ],
                targets: [
                    .executableTarget(name: "App", dependencies: [
                        .product(name: "Tandem", package: "tandem"),
                    ]),
                ]
            )
            """.write(to: app.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        // The block as written, then the app's own model, which the README leaves to the app.
        let example = try Self.block(after: "## Connecting the engines to a server (`TandemClient`)")
        try """
            \(example)

            struct Todo: SyncModel {
                let id: String
                var title: String
            }
            """.write(to: app.appendingPathComponent("Sources/App/main.swift"), atomically: true, encoding: .utf8)

        let process = ChildSpawn()
        process.executableURL = URL(filePath: "/usr/bin/env")
        process.arguments = ["swift", "build", "--package-path", app.path, "--scratch-path", app.appendingPathComponent(".build").path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let collected = Collector(output.fileHandleForReading)
        let exited = Exit()
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        try process.run()
        let status = await exited.wait()
        let text = await collected.text()
        #expect(status == 0, "the README's client example does not build as an app copies it:\n\(text.suffix(4000))")
    }
}
