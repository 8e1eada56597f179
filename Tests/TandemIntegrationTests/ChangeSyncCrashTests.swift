import Foundation
import Testing
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// A device running a change-sync engine is killed with SIGKILL at seeded points, again and
/// again, while its changes are on their way; relaunched, it sends what was left, and every change
/// lands exactly once.
@Suite("Change sync crash safety", .serialized, .timeLimit(.minutes(5)))
struct ChangeSyncCrashTests {
    let now = AuthenticationTests.WallClock()

    @Test("killed five times each between sendChanges and the server's answer, then relaunched: every queued change lands once, none twice (a change applied twice would meet its own version precondition as a conflict)",
          arguments: Array(1...10) as [UInt64])
    func killedDevice(seed: UInt64) async throws {
        let writer = try #require(ChildProcess.built("CrashWriter"), "CrashWriter is not built; run `swift build --build-tests` first")
        let (server, tokens) = try await AuthenticationTests.server(now: now)
        let token = try tokens.mint(subject: "ada", lifetime: .seconds(3_600), now: now.withLock { $0 })
        let directory = TemporaryDirectory()
        var random = SeededRandomNumberGenerator(seed: seed)
        var queued: [String: String] = [:]
        // What a kill may have cut off after sendChanges returned and before its line was printed.
        var cutOff: Set<String> = []
        var next = 0
        for _ in 0..<5 {
            let (lines, killed) = try await ChildProcess.runAndKill(writer, arguments: ["changes", directory.url.path, server.url.absoluteString, token, String(next)],
                                                                    afterLines: Int.random(in: 1...30, using: &random))
            #expect(killed, "the device was killed, not finished")
            for line in lines {
                let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
                if parts.count == 3, parts[0] == "queued" { queued[parts[1]] = parts[2] }
            }
            let cut = next + lines.count
            cutOff.formUnion(["item \(cut)", "item \(cut), edited"])
            next = cut + 10
        }
        #expect(!queued.isEmpty)

        // The device again, with its files.
        var configuration = TandemClientConfiguration()
        configuration.clientID = "crash-device"
        configuration.storageDirectory = directory.url
        configuration.token = token
        configuration.logger.logLevel = .critical
        let running = RunningClient(url: server.url, id: "crash-device") { $0 = configuration }
        let engine = try ChangeSyncEngine(client: running.client, configuration: ChangeSyncEngine.Configuration(zoneName: "crash"))
        let events = engine.events()
        let trouble = Task {
            var seen: [String] = []
            for await event in events {
                switch event {
                case .sent(let results):
                    seen += results.conflicts.map { "conflict on \($0.client.id)" } + results.failed.map { "\($0.recordID) failed: \($0.error)" }
                case .sendFailed(_, let failures):
                    seen += failures.map { "\($0.recordID) failed: \($0.error)" }
                case .stopped(let error):
                    seen.append("stopped: \(error)")
                default:
                    break
                }
            }
            return seen
        }
        engine.start()
        for await status in engine.states() where status.account == "ada" && status.isRunning && status.pendingCount == 0 && status.currentQueue == nil { break }

        let stored = try await server.store.changes(since: Version(0), in: .collection(collectionPath("users/ada/zones/crash/records"), Query()), limit: 100_000).changes
        var titles: [String: String] = [:]
        for change in stored { titles[change.path.id] = change.document?.data["title"]?.stringValue }
        for (id, title) in queued {
            #expect(titles[id] == title || cutOff.contains(titles[id] ?? ""), "\(id): queued as '\(title)', the server has '\(titles[id] ?? "nothing")'")
        }
        let unexpected = titles.filter { id, title in queued[id] == nil && !cutOff.contains(title) }
        #expect(unexpected.isEmpty, "records nobody queued: \(unexpected)")
        engine.stop()
        trouble.cancel()
        let seen = await trouble.value
        await running.stop()
        await server.stop()
        #expect(seen.isEmpty, "\(seen)")
    }
}
