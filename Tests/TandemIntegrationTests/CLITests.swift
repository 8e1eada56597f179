import Foundation
import Synchronization
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// The `tandem` command line, run as a child process against real servers.
@Suite("CLI", .serialized)
struct CLITests {
    /// Starts `tandem serve` on a free port and returns it with its URL.
    static func serve(_ directory: URL) async throws -> (RunningProcess, String) {
        let process = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.path])
        let line = try #require(await process.nextLine(), "tandem serve printed nothing")
        #expect(line.hasPrefix("listening on http://127.0.0.1:"))
        return (process, String(line.dropFirst("listening on ".count)))
    }

    @Test("serve prints where it listens and shuts down cleanly on SIGTERM and on SIGINT", arguments: [SIGTERM, SIGINT])
    func serve(signal: Int32) async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let directory = TemporaryDirectory()
        let (server, url) = try await Self.serve(directory.url)
        let health = try await CLIProcess.run(["get", "a/b", "--url", url])
        #expect(health.status == 1 && health.err.contains("not-found"))
        server.signal(signal)
        #expect(await server.waitForExit() == 0)
        #expect(FileManager.default.fileExists(atPath: directory.url.appendingPathComponent("tandem.sqlite").path))
    }

    @Test("serve warns loudly when it runs open on an address others reach, not on loopback; --allow-origin takes origins only")
    func openServerWarning() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let scratch = TemporaryDirectory()
        func lines(_ arguments: [String]) async throws -> [String] {
            let server = try RunningProcess(["serve", "--port", "0", "--data-dir", scratch.url.appendingPathComponent(UUID().uuidString).path] + arguments, errorsToo: true)
            var lines: [String] = []
            // Up to the note the server prints once it listens (and the warning after it).
            while let line = await server.nextLine() {
                lines.append(line)
                if line.hasPrefix("note:") { break }
            }
            server.signal(SIGTERM)
            while let line = await server.nextLine() { lines.append(line) }
            #expect(await server.waitForExit() == 0, "\(lines)")
            return lines
        }
        let exposed = try await lines(["--host", "0.0.0.0"])
        #expect(exposed.contains { $0.hasPrefix("WARNING: this server runs OPEN on 0.0.0.0") }, "\(exposed)")
        let local = try await lines([])
        #expect(local.contains { $0.hasPrefix("note: the server runs open") } && !local.contains { $0.contains("WARNING") }, "\(local)")
        let secured = try await lines(["--host", "0.0.0.0", "--auth-secret", "a-secret-that-is-long-enough-for-hs256", "--allow-origin", "https://app.example"])
        #expect(!secured.contains { $0.contains("WARNING") }, "\(secured)")
        let bad = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", scratch.url.path, "--allow-origin", "app.example/path"])
        #expect(bad.status == 2 && bad.err.contains("--allow-origin takes an origin"), "\(bad.err)")
    }

    @Test("a busy port, a data directory that cannot be made and a missing file are each told in one line saying what to do")
    func startupErrors() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let scratch = TemporaryDirectory()
        let busy = try await LiveServer.start()
        var result = try await CLIProcess.run(["serve", "--port", String(busy.port), "--data-dir", scratch.url.appendingPathComponent("data").path])
        #expect(result.status == 1 && result.err.contains("port \(busy.port) on 127.0.0.1 is in use") && result.err.contains("--port"), "\(result.err)")
        await busy.stop()
        let file = scratch.url.appendingPathComponent("a-file")
        try "x".write(to: file, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", file.path])
        #expect(result.status == 2 && result.err.contains("already exists. Give a directory") && result.err.contains("--data-dir") && !result.err.contains("NSCocoaErrorDomain"), "\(result.err)")
        result = try await CLIProcess.run(["import", scratch.url.appendingPathComponent("missing.jsonl").path, "--collection", "x"])
        #expect(result.status == 1 && result.err.contains("exist. Check the path.") && !result.err.contains(".."), "\(result.err)")
        for output in [result.err] { #expect(output.split(separator: "\n").count == 1, "\(output)") }
        for (flag, value, message) in [("--statement-timeout", "0", "--statement-timeout takes a number of seconds above 0"),
                                       ("--shutdown-grace", "-1", "--shutdown-grace takes a number of seconds above 0"),
                                       ("--max-connections", "0", "--max-connections takes a count of at least 1"),
                                       ("--max-connections-per-address", "0", "--max-connections-per-address takes a count of at least 1")] {
            result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", scratch.url.appendingPathComponent("flags").path, "\(flag)=\(value)"])
            #expect(result.status == 2 && result.err.contains(message), "\(flag) \(value): \(result.err)")
        }
    }

    @Test("backup copies a running server's data while writes go on: the copy is every commit up to one version, whole, and serves as it was; it never overwrites")
    func backupWhileWriting() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let scratch = TemporaryDirectory()
        let source = scratch.url.appendingPathComponent("data")
        let server = try await LiveServer.start(directory: source)
        for index in 1...50 { _ = try await server.store.commit([.set(documentPath("notes/\(index)"), ["n": .int(index)])]) }
        // Writes go on while the backup is taken: each commit writes one new document.
        let writer = Task {
            var index = 51
            while !Task.isCancelled {
                _ = try await server.store.commit([.set(documentPath("notes/\(index)"), ["n": .int(index)])])
                index += 1
            }
        }
        let destination = scratch.url.appendingPathComponent("copy")
        var result = try await CLIProcess.run(["backup", destination.path, "--data-dir", source.path])
        writer.cancel()
        _ = try? await writer.value
        #expect(result.status == 0 && result.out.hasPrefix("backed up"), "\(result.err)")
        let written = try await server.store.currentVersion()
        await server.stop()

        let copy = try await LiveServer.start(directory: destination)
        let version = try await copy.store.currentVersion()
        #expect(result.out.contains("at version \(version.rawValue)"), "\(result.out)")
        let documents = try await copy.store.read(.collection(collectionPath("notes"), Query())).documents
        // One consistent cut: exactly the commits up to its version, each whole.
        #expect(version.rawValue >= 50 && version <= written)
        #expect(documents.count == Int(version.rawValue))
        #expect(Set(documents.map(\.version.rawValue)) == Set(1...version.rawValue))
        #expect(documents.allSatisfy { $0.data["n"] == .int(Int($0.version.rawValue)) })
        await copy.stop()

        result = try await CLIProcess.run(["backup", destination.path, "--data-dir", source.path])
        #expect(result.status == 1 && result.err.contains("already-exists") && result.err.contains("never overwrites"), "\(result.err)")
        result = try await CLIProcess.run(["backup", scratch.url.appendingPathComponent("other").path, "--data-dir", scratch.url.appendingPathComponent("nothing").path])
        #expect(result.status == 1 && result.err.contains("not-found"), "\(result.err)")
    }

    @Test("get, set, update, delete and query print JSON; errors go to stderr with their code")
    func documentCommands() async throws {
        let server = try await LiveServer.start()
        let url = server.url.absoluteString
        var result = try await CLIProcess.run(["set", "users/ada", #"{"name": "Ada", "age": 36, "visits": {"$increment": 1}}"#, "--url", url])
        #expect(result.status == 0)
        #expect(try JSONText.parse(result.out)[field: "data"] == ["name": "Ada", "age": 36, "visits": 1])
        result = try await CLIProcess.run(["set", "users/bob", #"{"name": "Bob", "age": 17}"#, "--url", url])
        result = try await CLIProcess.run(["set", "users/bob", #"{"city": "Paris"}"#, "--merge", "--url", url])
        #expect(try JSONText.parse(result.out)[field: "data"] == ["name": "Bob", "age": 17, "city": "Paris"])
        result = try await CLIProcess.run(["update", "users/ada", #"{"address.city": "London", "visits": {"$increment": 2}}"#, "--url", url])
        #expect(try JSONText.parse(result.out)[field: "data"] == ["name": "Ada", "age": 36, "visits": 3, "address": ["city": "London"]])
        result = try await CLIProcess.run(["get", "users/ada", "--url", url])
        #expect(try JSONText.parse(result.out)[field: "version"] == 4)

        result = try await CLIProcess.run(["query", "users", "--where", "age >= 18", "--url", url])
        #expect(result.lines.count == 1 && result.out.contains("users/ada"))
        result = try await CLIProcess.run(["query", "users", "--order-by", "age:desc", "--limit", "2", "--url", url])
        #expect(try result.lines.map { try JSONText.parse($0)[field: "path"] } == ["users/ada", "users/bob"])
        result = try await CLIProcess.run(["query", "users", "--group", "--where", "name in [\"Bob\"]", "--url", url])
        #expect(result.lines.count == 1 && result.out.contains("users/bob"))

        result = try await CLIProcess.run(["delete", "users/bob", "--url", url])
        #expect(result.status == 0 && result.out.contains("\"deleted\":true"))
        result = try await CLIProcess.run(["get", "users/bob", "--url", url])
        #expect(result.status == 1 && result.err.hasPrefix("error: not-found:") && result.out.isEmpty)
        result = try await CLIProcess.run(["update", "users/zed", #"{"a": 1}"#, "--url", url])
        #expect(result.status == 1 && result.err.contains("not-found"))
        result = try await CLIProcess.run(["set", "users", "{}", "--url", url])
        #expect(result.status == 1 && result.err.contains("invalid-argument"))
        result = try await CLIProcess.run(["set", "users/x", "{oops", "--url", url])
        #expect(result.status == 1 && result.err.contains("invalid-argument") && result.err.contains("not valid JSON"))
        result = try await CLIProcess.run(["query", "users", "--where", "age ~ 3", "--url", url])
        #expect(result.status == 1 && result.err.contains("Unknown operator"))
        result = try await CLIProcess.run(["get", "users/ada", "--url", "http://127.0.0.1:1"])
        #expect(result.status == 1 && result.err.contains("unavailable"))
        // watch, too, says at once that no server is there (it printed nothing and never exited).
        result = try await CLIProcess.run(["watch", "users", "--url", "http://127.0.0.1:1"])
        #expect(result.status == 1 && result.err.contains("unavailable") && result.err.contains("Is `tandem serve` running there?"), "\(result.err)")
        // An order suffix that is neither :asc nor :desc is refused, not read as a field name.
        result = try await CLIProcess.run(["query", "users", "--order-by", "age:up", "--url", url])
        #expect(result.status == 1 && result.err.contains("':up'"), "\(result.err)")
        result = try await CLIProcess.run(["query", "users", "--order-by", "age:asc", "--url", url])
        #expect(result.status == 0, "\(result.err)")
        // Bodies too long for a command line: from standard input (-) or a file (@FILE).
        let large = String(repeating: "x", count: 300_000)
        result = try await CLIProcess.run(["set", "users/big", "-", "--url", url], input: #"{"text": "\#(large)"}"#)
        #expect(result.status == 0, "\(result.err)")
        #expect(try await server.store.document(at: documentPath("users/big"))?.data["text"]?.stringValue?.count == 300_000)
        let scratch = TemporaryDirectory()
        let file = scratch.url.appendingPathComponent("fields.json")
        try #"{"text": "short"}"#.write(to: file, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["update", "users/big", "@" + file.path, "--url", url])
        #expect(result.status == 0, "\(result.err)")
        #expect(try await server.store.document(at: documentPath("users/big"))?.data["text"] == "short")
        result = try await CLIProcess.run(["set", "users/big", "@/no/such/file.json", "--url", url])
        #expect(result.status == 1 && result.err.contains("not-found") && result.err.contains("/no/such/file.json"), "\(result.err)")
        await server.stop()
    }

    @Test("watch prints one line per change and stops after --count")
    func watch() async throws {
        let server = try await LiveServer.start()
        _ = try await server.store.commit([.set(documentPath("notes/1"), ["text": "first"])])
        let watcher = try RunningProcess(["watch", "notes", "--where", "text != \"skip\"", "--count", "4", "--url", server.url.absoluteString])
        var lines: [JSONValue] = []
        lines.append(try JSONText.parse(try #require(await watcher.nextLine())))  // the snapshot
        _ = try await server.store.commit([.set(documentPath("notes/2"), ["text": "second"])])
        _ = try await server.store.commit([.set(documentPath("notes/3"), ["text": "skip"])])
        _ = try await server.store.commit([.update(documentPath("notes/1"), fields: ["text": "first, edited"])])
        _ = try await server.store.commit([.delete(documentPath("notes/2"))])
        while let line = await watcher.nextLine() { lines.append(try JSONText.parse(line)) }
        #expect(await watcher.waitForExit() == 0)
        #expect(lines.map { $0[field: "type"] } == ["added", "added", "modified", "removed"])
        #expect(lines.map { $0[field: "path"] } == ["notes/1", "notes/2", "notes/1", "notes/2"])
        #expect(lines[2][field: "data"] == ["text": "first, edited"])
        #expect(lines[3][field: "data"] == .null)
        await server.stop()
    }

    @Test("watch --group follows a collection group across parents")
    func watchGroup() async throws {
        let server = try await LiveServer.start()
        _ = try await server.store.commit([.set(documentPath("shops/a/reviews/1"), ["stars": 4])])
        let watcher = try RunningProcess(["watch", "reviews", "--group", "--count", "2", "--url", server.url.absoluteString])
        var lines: [JSONValue] = []
        lines.append(try JSONText.parse(try #require(await watcher.nextLine())))  // the snapshot
        _ = try await server.store.commit([.set(documentPath("shops/b/reviews/2"), ["stars": 5])])
        _ = try await server.store.commit([.set(documentPath("shops/b/notes/3"), ["stars": 1])])
        while let line = await watcher.nextLine() { lines.append(try JSONText.parse(line)) }
        #expect(await watcher.waitForExit() == 0)
        #expect(lines.map { $0[field: "path"] } == ["shops/a/reviews/1", "shops/b/reviews/2"])
        #expect(lines.map { $0[field: "type"] } == ["added", "added"])
        await server.stop()
    }

    @Test("import checks the whole file first; export prints JSON lines that import back")
    func importExport() async throws {
        let server = try await LiveServer.start()
        let url = server.url.absoluteString
        let directory = TemporaryDirectory()
        let file = directory.url.appendingPathComponent("items.jsonl")
        let lines = (0..<1200).map { #"{"id": "item\#($0)", "n": \#($0)}"# } + [#"{"n": "no id"}"#]
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        var result = try await CLIProcess.run(["import", file.path, "--collection", "items", "--url", url])
        #expect(result.status == 0)
        #expect(result.out.hasPrefix("imported 1201 documents into items"))  // a summary, not a progress bar
        #expect(try await server.store.read(.collection(collectionPath("items"), Query())).documents.count == 1201)

        result = try await CLIProcess.run(["export", "items", "--url", url])
        #expect(result.lines.count == 1201)
        let exported = directory.url.appendingPathComponent("export.jsonl")
        try result.out.write(to: exported, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["import", exported.path, "--collection", "copy", "--url", url])
        #expect(result.status == 0)
        let copy = try await server.store.read(.collection(collectionPath("copy"), Query())).documents
        let original = try await server.store.read(.collection(collectionPath("items"), Query())).documents
        #expect(copy.map(\.path.id) == original.map(\.path.id))

        let bad = directory.url.appendingPathComponent("bad.jsonl")
        try "{\"id\": \"a\"}\n[1, 2]\n".write(to: bad, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["import", bad.path, "--collection", "bad", "--url", url])
        #expect(result.status == 1 && result.err.contains("Line 2") && result.err.contains("Nothing was imported"))
        #expect(try await server.store.read(.collection(collectionPath("bad"), Query())).documents.isEmpty)
        await server.stop()
    }

    /// A random body: nested objects and arrays of every JSON kind, integers and doubles that look
    /// alike (1 and 1.0), text in several scripts, and an "id" field of any kind now and then.
    static func body(_ random: inout SeededRandomNumberGenerator, depth: Int = 0) -> JSONObject {
        var object: JSONObject = [:]
        let names = ["id", "n", "name", "data", "nested", "list", "café", "ünï"]
        for _ in 0..<Int(random.next() % 5) {
            object[names[Int(random.next() % UInt64(names.count))]] = value(&random, depth: depth)
        }
        return object
    }

    static func value(_ random: inout SeededRandomNumberGenerator, depth: Int) -> JSONValue {
        switch random.next() % (depth < 3 ? 10 : 8) {
        case 0: return .null
        case 1: return .bool(random.next() % 2 == 0)
        case 2: return .int([0, 1, -7, Int.max, Int.min, 1 << 53][Int(random.next() % 6)])
        case 3: return .double([1.0, 0.5, -3.25, 1e21, 2.5e-8, 9007199254740993.0][Int(random.next() % 6)])
        case 4, 5: return .string(["", "other", "é", "e\u{301}", "日本語", "line\nbreak", "\"quoted\"", "🙂"][Int(random.next() % 8)])
        case 6: return .int(Int(truncatingIfNeeded: random.next() % 1000))
        case 7: return .double(Double(random.next() % 1000) / 8)
        case 8: return .array((0..<Int(random.next() % 4)).map { _ in value(&random, depth: depth + 1) })
        default: return .object(body(&random, depth: depth + 1))
        }
    }

    @Test("export then import round-trips every document exactly: ids, bodies with their own \"id\", nested values, integers and doubles; a plain line's non-string or repeated id is refused")
    func exportImportRoundTrip() async throws {
        let server = try await LiveServer.start()
        let url = server.url.absoluteString
        let directory = TemporaryDirectory()
        // The reproduction: a body whose own "id" names another document.
        var writes: [Mutation] = [.set(documentPath("exp/doc1"), ["id": "other", "n": 1])]
        var random = SeededRandomNumberGenerator(seed: 41)
        let ids = ["plain", "with space", "dotted.id", "ünïcode", "e\u{301}", "é", "x:y", "other"]
        for index in 0..<200 {
            writes.append(.set(documentPath("exp/\(index < ids.count ? ids[index] : "d\(index)")"), Self.body(&random)))
        }
        _ = try await server.store.commit(writes)
        var result = try await CLIProcess.run(["export", "exp", "--url", url])
        #expect(result.status == 0, "\(result.err)")
        let exported = directory.url.appendingPathComponent("exp.jsonl")
        try result.out.write(to: exported, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["import", exported.path, "--collection", "exp2", "--url", url])
        #expect(result.status == 0 && result.out.hasPrefix("imported 201 documents into exp2"), "\(result.out) \(result.err)")
        let original = try await server.store.read(.collection(collectionPath("exp"), Query())).documents
        let copy = try await server.store.read(.collection(collectionPath("exp2"), Query())).documents
        #expect(original.count == 201 && copy.count == 201)
        #expect(copy.map { Array($0.path.id.utf8) } == original.map { Array($0.path.id.utf8) })
        for (a, b) in zip(original, copy) {
            #expect(JSONText.encode(.object(a.data)) == JSONText.encode(.object(b.data)), "\(a.path.id)")
        }
        #expect(try await server.store.document(at: documentPath("exp2/doc1"))?.data == ["id": "other", "n": 1])
        #expect(try await server.store.document(at: documentPath("exp2/other"))?.data == original.first { $0.path.id == "other" }?.data)

        // Plain lines: a non-string id, and one id given twice, stop the import before it writes.
        let numbered = directory.url.appendingPathComponent("numbered.jsonl")
        try "{\"id\": \"a\"}\n{\"id\": 7, \"n\": 1}\n".write(to: numbered, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["import", numbered.path, "--collection", "plain", "--url", url])
        #expect(result.status == 1 && result.err.contains("Line 2") && result.err.contains("not a string"), "\(result.err)")
        let twice = directory.url.appendingPathComponent("twice.jsonl")
        try "{\"id\": \"a\", \"n\": 1}\n{\"id\": \"b\"}\n{\"id\": \"a\", \"n\": 2}\n".write(to: twice, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["import", twice.path, "--collection", "plain", "--url", url])
        #expect(result.status == 1 && result.err.contains("Lines 1 and 3"), "\(result.err)")
        #expect(try await server.store.read(.collection(collectionPath("plain"), Query())).documents.isEmpty)
        await server.stop()
    }

    @Test("import on a terminal shows a progress bar, batch by batch, then its summary")
    func importProgress() async throws {
        let server = try await LiveServer.start()
        let directory = TemporaryDirectory()
        let file = directory.url.appendingPathComponent("items.jsonl")
        try (0..<1200).map { #"{"id": "item\#($0)", "n": \#($0)}"# }.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        let result = try await CLIProcess.runOnTerminal(["import", file.path, "--collection", "items", "--url", server.url.absoluteString])
        #expect(result.status == 0, "\(result.out)")
        // One bar per batch of 500, redrawn in place, then the summary on its own line.
        // (By scalar: the terminal ends lines with "\r\n", one Character.)
        let bars = result.out.unicodeScalars.split(separator: "\r").map { String(String.UnicodeScalarView($0)) }.filter { $0.hasPrefix("[") }
        #expect(bars.map { $0.split(separator: "]").last.map { $0.trimmingCharacters(in: .whitespaces) } } == ["500/1200", "1000/1200", "1200/1200"])
        #expect(bars.last?.hasPrefix("[" + String(repeating: "#", count: 30) + "]") == true)
        #expect(result.out.contains("imported 1200 documents into items"))
        #expect(try await server.store.read(.collection(collectionPath("items"), Query())).documents.count == 1200)
        await server.stop()
    }

    @Test("bench synced runs at a small size and prints its figures beside the engine's")
    func benchSynced() async throws {
        // Timings here mean nothing (a debug build, a tiny size): only that every part runs and reports.
        let result = try await CLIProcess.run(["bench", "synced", "--elements", "200", "--edits", "20", "--batch", "50"])
        #expect(result.status == 0, "\(result.err)")
        for figure in ["one edit of a 200-element SyncedCollection (diff and enqueue)", "beside CollectionSyncEngine.updateDocument of the same field",
                       "until it is in the engine's outbox", "a remote batch of 50 changes applied to a 200-element SyncedCollection vs the engine applying it"] {
            #expect(result.out.contains(figure), "missing: \(figure)")
        }
    }

    @Test("bench metrics writes a scrape beside the same lines written by hand, byte for byte the same size")
    func benchMetrics() async throws {
        let result = try await CLIProcess.run(["bench", "metrics", "--series", "200", "--repetitions", "2"])
        #expect(result.status == 0, "\(result.err)")
        let line = result.out.split(separator: "\n").first { $0.contains("a scrape of 200 series") }
        #expect(line != nil, "missing the scrape's figure: \(result.out)")
        if let line {
            // "(N bytes) through swift-prometheus vs the same lines appended by hand (N bytes)"
            let sizes = line.split(separator: "(").dropFirst().compactMap { $0.split(separator: " ").first.flatMap { Int($0) } }
            #expect(sizes.count == 2 && sizes[0] == sizes[1], "\(line)")
        }
        #expect(result.out.contains("(target ≤ 5 ms:"))
    }

    @Test("bench changes runs at a small size and prints each figure beside the plain calls'")
    func benchChanges() async throws {
        // Timings here mean nothing (a debug build, a tiny size): only that every part runs and reports.
        let result = try await CLIProcess.run(["bench", "changes", "--records", "300", "--rounds", "2"])
        #expect(result.status == 0, "\(result.err)")
        for figure in ["records sent through ChangeSyncEngine vs POST /v1/commit", "records fetched through ChangeSyncEngine vs GET /v1/changes",
                       "encrypted records (a sealed property each) sent through ChangeSyncEngine", "encrypted records (a sealed property each) fetched through ChangeSyncEngine"] {
            #expect(result.out.contains(figure), "missing: \(figure)")
        }
    }

    @Test("bench server runs each of its parts at a small size and prints each figure beside its baseline and target")
    func benchServer() async throws {
        // Timings here mean nothing (a debug build, a tiny size): only that every part runs and reports.
        let result = try await CLIProcess.run(["bench", "server", "--documents", "600", "--writes", "16", "--connections", "40"])
        #expect(result.status == 0, "\(result.err)")
        for figure in ["1 client writing one at a time vs GRDB inserts 1 per transaction",
                       "16 clients writing one at a time vs GRDB inserts 16 per transaction",
                       "initial sync of 600 documents into a client's SQLite cache",
                       "WebSocket echo round trip on loopback",
                       "commit-to-listener latency, 1 listener:", "commit-to-listener latency, 100 listeners:",
                       "commit-to-listener latency, 1000 listeners:", "initial sync ran at",
                       "memory left behind per WebSocket session opened and closed",
                       "one client with up to 100 writes in flight vs the same client one at a time",
                       "16 clients writing one at a time while 1000 listeners receive every commit",
                       "the writers keep"] {
            #expect(result.out.contains(figure), "missing: \(figure)")
        }
        #expect(result.out.components(separatedBy: "baseline:").count - 1 == 6)  // five figures and the echo
        #expect(result.out.components(separatedBy: "target").count - 1 >= 5)
    }

    @Test("demo runs a server and two clients and exits 0 when they agree")
    func demo() async throws {
        let result = try await CLIProcess.run(["demo"])
        #expect(result.status == 0, "\(result.out)\n\(result.err)")
        #expect(result.out.contains("B (offline)"))
        #expect(result.lines.last?.hasPrefix("ok: A, B and the server agree") == true)
    }

    @Test("a server killed with SIGKILL and restarted still has every acknowledged write", .timeLimit(.minutes(5)))
    func sigkill() async throws {
        let directory = TemporaryDirectory()
        var (server, url) = try await Self.serve(directory.url)
        let acknowledged = AcknowledgedIDs()
        for round in 0..<2 {
            let client = RunningClient(url: URL(string: url)!, id: "writer")
            await client.client.waitUntilConnected()
            // Sixteen writers at once, so commits are grouped, then the kill mid-stream.
            await withTaskGroup(of: Void.self) { group in
                for writer in 0..<16 {
                    group.addTask {
                        for index in 0..<25 {
                            let id = round * 1000 + writer * 25 + index
                            let mutation = Mutation.set(documentPath("items/\(id)"), ["n": .int(id)])
                                .identified(by: MutationID(clientID: "writer-\(round)-\(writer)", sequence: UInt64(index + 1)))
                            if (try? await client.client.commit([mutation])) != nil { acknowledged.add(id) }
                        }
                    }
                }
            }
            let before = acknowledged.count
            // Kill while more writes are in flight.
            let flood = Task {
                for index in 0..<500 {
                    let id = round * 1000 + 500 + index
                    if (try? await client.client.commit([.set(documentPath("items/\(id)"), ["n": .int(id)])])) != nil {
                        acknowledged.add(id)
                    } else {
                        return
                    }
                }
            }
            #expect(await acknowledged.wait(forMoreThan: before + 20))
            server.signal(SIGKILL)
            #expect(await server.waitForExit() != 0)
            await flood.value
            await client.stop()
            (server, url) = try await Self.serve(directory.url)
        }
        let check = RunningClient(url: URL(string: url)!, id: "checker")
        await check.client.waitUntilConnected()
        let stored = try await check.client.documents(.collection(collectionPath("items"), Query()))
        let values = Dictionary(uniqueKeysWithValues: stored.map { ($0.path.id, $0.data["n"]) })
        #expect(acknowledged.count > 800)
        for id in acknowledged.ids {
            #expect(values["\(id)"] == .int(id), "acknowledged write \(id) is missing after SIGKILL")
        }
        await check.stop()
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }
}

/// Ids whose writes the server acknowledged.
final class AcknowledgedIDs: Sendable {
    private let state = Locked<Set<Int>>([])
    func add(_ id: Int) { _ = state.withLock { $0.insert(id) } }
    var ids: Set<Int> { state.value }
    var count: Int { state.value.count }
    /// Returns once more than `count` writes were acknowledged.
    func wait(forMoreThan count: Int) async -> Bool { await state.wait { $0.count > count } }
}

extension CLITests {
    @Test("serve --auth-secret requires tokens; token mints one; client commands send it with --token; a short secret is refused at start")
    func authentication() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let secret = String(repeating: "s3cret-", count: 6)
        let short = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", TemporaryDirectory().url.path, "--auth-secret", "short"])
        #expect(short.status == 2 && short.err.contains("at least 32"))

        let directory = TemporaryDirectory()
        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.path, "--auth-secret", secret])
        let line = try #require(await server.nextLine(), "tandem serve printed nothing")
        let url = String(line.dropFirst("listening on ".count))

        let minted = try await CLIProcess.run(["token", "--sub", "ada", "--secret", secret, "--ttl", "15m", "--claim", "role=editor", "--claim", "admin=true"])
        #expect(minted.status == 0)
        let token = minted.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let user = try await BearerTokens(secret: secret).verify(token)
        #expect(user.uid == "ada" && user.claims["role"] == "editor" && user.claims["admin"] == true)
        if let expiresAt = user.expiresAt { #expect(expiresAt.timeIntervalSinceNow > 800 && expiresAt.timeIntervalSinceNow <= 900) } else { Issue.record("no exp") }

        var result = try await CLIProcess.run(["set", "users/ada/notes/1", #"{"text": "hi"}"#, "--url", url])
        #expect(result.status == 1 && result.err.contains("unauthenticated"))
        result = try await CLIProcess.run(["set", "users/ada/notes/1", #"{"text": "hi"}"#, "--url", url, "--token", token])
        #expect(result.status == 0, "\(result.err)")
        result = try await CLIProcess.run(["get", "users/bob/notes/1", "--url", url, "--token", token])
        #expect(result.status == 1 && result.err.contains("permission-denied"))
        result = try await CLIProcess.run(["token", "--sub", "ada", "--secret", secret, "--ttl", "soon"])
        #expect(result.status == 1 && result.err.contains("--ttl"))
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    @Test("console prints the console's address; with --as, one whose fragment holds a token the server accepts for that user; a secret without --as is refused")
    func consoleCommand() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        var result = try await CLIProcess.run(["console"])
        #expect(result.status == 0 && result.out == "http://127.0.0.1:8080/console/\n")
        result = try await CLIProcess.run(["console", "--url", "https://example.com:9443/"])
        #expect(result.out == "https://example.com:9443/console/\n")
        let secret = String(repeating: "s", count: 40)
        result = try await CLIProcess.run(["console", "--as", "ada", "--secret", secret, "--claim", "admin=true", "--url", "http://127.0.0.1:9000"])
        let address = result.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let prefix = "http://127.0.0.1:9000/console/#token="
        try #require(address.hasPrefix(prefix), "\(address) \(result.err)")
        let user = try await BearerTokens(secret: secret).verify(String(address.dropFirst(prefix.count)))
        #expect(user.uid == "ada" && user.claims["admin"] == true)
        result = try await CLIProcess.run(["console", "--secret", secret])
        #expect(result.status == 1 && result.err.contains("invalid-argument") && result.err.contains("--as"))
        result = try await CLIProcess.run(["console", "--url", "ftp://x"])
        #expect(result.status == 1 && result.err.contains("--url"))
    }

    @Test("serve --tls-cert/--tls-key: listening on https; one flag alone or a bad file stops it at start with exit 2")
    func tls() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let certificates = try TestCertificates()
        let directory = TemporaryDirectory()
        var result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--tls-cert", certificates.certificateFile])
        #expect(result.status == 2 && result.err.contains("go together"), "\(result.err)")
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--tls-cert", certificates.keyFile, "--tls-key", certificates.keyFile])
        #expect(result.status == 2 && result.err.contains(certificates.keyFile), "\(result.err)")
        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.path, "--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile])
        let line = try #require(await server.nextLine(), "tandem serve printed nothing")
        #expect(line.hasPrefix("listening on https://127.0.0.1:"))
        server.signal(SIGINT)
        #expect(await server.waitForExit() == 0)
    }

    @Test("rules: `tandem rules check` reports a file's errors by line and column; `serve --rules` refuses a bad file and enforces a good one")
    func rules() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let secret = String(repeating: "s3cret-", count: 6)
        let directory = TemporaryDirectory()
        let good = directory.url.appendingPathComponent("rules.yaml").path
        try """
        rules:
          - match: rooms/{room}
            read: auth != null
            create: request.data.owner == auth.uid
            update: resource.data.owner == auth.uid && request.data.owner == auth.uid
            delete: resource.data.owner == auth.uid
          - match: public/{doc}
            read: true
        """.write(toFile: good, atomically: true, encoding: .utf8)
        let bad = directory.url.appendingPathComponent("bad.yaml").path
        try "rules:\n  - match: rooms/{room}\n    read: auth.uid = room\n".write(toFile: bad, atomically: true, encoding: .utf8)

        var result = try await CLIProcess.run(["rules", "check", good])
        #expect(result.status == 0 && result.out.contains("2 rules, valid"), "\(result.err)")
        result = try await CLIProcess.run(["rules", "check", bad])
        #expect(result.status == 1 && result.err.contains("\(bad):3:20:") && result.err.contains("`==`"), "\(result.err)")
        // Every wrong rule is told, each on its own line, not the first alone.
        let worse = directory.url.appendingPathComponent("worse.yaml").path
        try "rules:\n  - match: rooms/{room}\n    read: auth.uid = room\n  - match: ok/{doc}\n    read: true\n  - match: notes/{n}\n    raed: true\n  - read: true\n".write(toFile: worse, atomically: true, encoding: .utf8)
        result = try await CLIProcess.run(["rules", "check", worse])
        let errors = result.err.split(separator: "\n").filter { $0.hasPrefix("error: ") }
        #expect(result.status == 1 && errors.count == 3, "\(result.err)")
        #expect(errors.count == 3 && errors[0].contains("\(worse):3:") && errors[1].contains("\(worse):7:") && errors[1].contains("unknown key") && errors[2].contains("\(worse):8:") && errors[2].contains("no `match`"), "\(result.err)")
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.appendingPathComponent("refused").path, "--auth-secret", secret, "--rules", bad])
        #expect(result.status == 2 && result.err.contains("\(bad):3:20:"), "\(result.err)")

        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.appendingPathComponent("data").path, "--auth-secret", secret, "--rules", good])
        let line = try #require(await server.nextLine(), "tandem serve printed nothing")
        let url = String(line.dropFirst("listening on ".count))
        let ada = try await CLIProcess.run(["token", "--sub", "ada", "--secret", secret]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        let bob = try await CLIProcess.run(["token", "--sub", "bob", "--secret", secret]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        result = try await CLIProcess.run(["set", "rooms/r1", #"{"owner": "ada", "name": "Lab"}"#, "--url", url, "--token", ada])
        #expect(result.status == 0, "\(result.err)")
        result = try await CLIProcess.run(["update", "rooms/r1", #"{"name": "Mine now"}"#, "--url", url, "--token", bob])
        #expect(result.status == 1 && result.err.contains("permission-denied") && result.err.contains("rule 1"), "\(result.err)")
        result = try await CLIProcess.run(["get", "rooms/r1", "--url", url, "--token", bob])
        #expect(result.status == 0 && result.out.contains("Lab"), "\(result.err)")
        result = try await CLIProcess.run(["query", "rooms", "--url", url, "--token", bob])
        #expect(result.status == 0 && result.out.contains("Lab"), "`read` gives list too: \(result.err)")
        result = try await CLIProcess.run(["query", "rooms", "--url", url])
        #expect(result.status == 1 && result.err.contains("unauthenticated"), "\(result.err)")
        result = try await CLIProcess.run(["get", "public/readme", "--url", url])
        #expect(result.status == 1 && result.err.contains("not-found"), "an anonymous read of a public document: \(result.err)")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }
}
