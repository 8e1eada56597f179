import Foundation
import Testing

/// The DocC catalogs' code is the code compiled here: every ```swift block of every article is a
/// region of a file in `DocumentationSnippets/`, which the test target compiles (and, where a
/// region sits in a test, runs). A region is delimited by `// snippet: NAME` and `// end snippet`;
/// it and the article's block must be the same lines, whatever the indentation of the whole.
@Suite("Documentation catalogs")
struct DocumentationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    static let modules = ["Tandem", "TandemCore", "TandemServer", "TandemTesting"]

    /// The articles the catalogs must hold, by module: the concept guides and a migration guide for
    /// each library Tandem replaces.
    static let requiredArticles: [String: [String]] = [
        "Tandem": [
            "Tandem", "GettingStarted", "TheSyncModel", "OfflineAndPendingWrites", "Conflicts", "SyncedState", "ReconcilingIntoYourTables",
            "MigratingFromSwiftfulDataManagers", "MigratingFromSyncReconcilerKit", "MigratingFromSharingFirestore",
            "MigratingFromTakeoffKit", "MigratingFromCohesionKit",
        ],
        "TandemCore": ["TandemCore"],
        "TandemServer": ["TandemServer", "RunningAServer", "ControllingAccess", "WireProtocol"],
        "TandemTesting": ["TandemTesting", "TestingWithTandemTesting"],
    ]

    struct Block: CustomStringConvertible {
        let file: String
        let line: Int
        let text: String
        var description: String { "\(file):\(line)" }
    }

    /// Every article of every catalog, by path relative to the package.
    static func articles() throws -> [(path: String, text: String)] {
        var found: [(String, String)] = []
        for module in modules {
            let catalog = root.appendingPathComponent("Sources/\(module)/\(module).docc")
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: catalog.path) else { continue }
            for name in names.sorted() where name.hasSuffix(".md") {
                found.append(("Sources/\(module)/\(module).docc/\(name)", try String(contentsOf: catalog.appendingPathComponent(name), encoding: .utf8)))
            }
        }
        return found
    }

    /// The fenced blocks of `language` in a markdown text.
    static func blocks(of language: String, in text: String, file: String) -> [Block] {
        var blocks: [Block] = []
        var current: [String]?
        var start = 0
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var lines = current {
                if trimmed == "```" {
                    blocks.append(Block(file: file, line: start, text: normalized(lines)))
                    current = nil
                } else {
                    lines.append(line)
                    current = lines
                }
            } else if trimmed == "```\(language)" {
                current = []
                start = index + 1
            }
        }
        return blocks
    }

    /// The regions of the snippet files, by name.
    static func regions() throws -> [String: Block] {
        let directory = root.appendingPathComponent("Tests/TandemIntegrationTests/DocumentationSnippets")
        var regions: [String: Block] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() where name.hasSuffix(".swift") {
            let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            var open: (name: String, line: Int, lines: [String])?
            for (index, line) in text.components(separatedBy: "\n").enumerated() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.hasPrefix("// snippet: ") {
                    if open != nil { throw SnippetError(message: "\(name):\(index + 1): a region opens inside another") }
                    open = (String(trimmed.dropFirst("// snippet: ".count)), index + 1, [])
                } else if trimmed == "// end snippet" {
                    guard let region = open else { throw SnippetError(message: "\(name):\(index + 1): an end with no region open") }
                    if regions[region.name] != nil { throw SnippetError(message: "\(name):\(region.line): region \(region.name) is named twice") }
                    regions[region.name] = Block(file: name, line: region.line, text: normalized(region.lines))
                    open = nil
                } else if open != nil {
                    open!.lines.append(line)
                }
            }
            if let open { throw SnippetError(message: "\(name): region \(open.name) never ends") }
        }
        return regions
    }

    struct SnippetError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// Lines without trailing spaces, without the indentation they all share, and without blank
    /// lines at either end.
    static func normalized(_ lines: [String]) -> String {
        var lines = lines.map { line in
            var line = Substring(line)
            while line.last == " " || line.last == "\t" { line.removeLast() }
            return String(line)
        }
        while lines.first?.isEmpty == true { lines.removeFirst() }
        while lines.last?.isEmpty == true { lines.removeLast() }
        let indent = lines.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return lines.map { $0.isEmpty ? $0 : String($0.dropFirst(indent)) }.joined(separator: "\n")
    }

    @Test("every catalog holds its landing page and the articles it must have")
    func catalogsComplete() throws {
        let present = Set(try Self.articles().map { URL(fileURLWithPath: $0.path).deletingPathExtension().lastPathComponent })
        for (module, names) in Self.requiredArticles {
            for name in names {
                #expect(present.contains(name), "Sources/\(module)/\(module).docc/\(name).md is missing")
            }
        }
    }

    @Test("every Swift block of every article is a compiled snippet region, and every region is shown by an article")
    func articleCodeCompiles() throws {
        let regions = try Self.regions()
        var byText: [String: String] = [:]
        for (name, region) in regions { byText[region.text] = name }
        var used: Set<String> = []
        var blocks = 0
        for article in try Self.articles() {
            for block in Self.blocks(of: "swift", in: article.text, file: article.path) {
                blocks += 1
                if let name = byText[block.text] {
                    used.insert(name)
                } else {
                    Issue.record("\(block): this Swift block is no region of Tests/TandemIntegrationTests/DocumentationSnippets, so nothing compiles it:\n\(block.text)")
                }
            }
        }
        #expect(blocks > 0)
        for name in Set(regions.keys).subtracting(used).sorted() {
            Issue.record("\(regions[name]!): region \(name) is shown by no article")
        }
    }

    @Test("the checker finds a block that differs from its region, and one no region holds")
    func checkerCatchesDrift() {
        let article = """
            # A

            ```swift
                let a = 1
                print(a)
            ```

            ```sh
            not swift
            ```
            """
        let blocks = Self.blocks(of: "swift", in: article, file: "A.md")
        #expect(blocks.count == 1)
        #expect(blocks.first?.text == "let a = 1\nprint(a)")
        #expect(blocks.first?.text != Self.normalized(["  let a = 2", "  print(a)"]))
        #expect(blocks.first?.text == Self.normalized(["", "        let a = 1", "        print(a)   ", ""]))
    }
}
