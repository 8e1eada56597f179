import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// A seeded fuzz run against a live server: WebSocket frames and HTTP bodies, malformed or mutated,
/// in bursts. After each burst the server still answers, a valid write still applies, every version
/// in the store is one an answer acknowledged (nothing written without an answer, nothing partly),
/// and every error carries a code of the stable set.
///
/// 10,000 frames and bodies by default; `TANDEM_FUZZ_ITERATIONS=1000000` runs longer, and
/// `TANDEM_FUZZ_SEED` picks another seed (the failing seed is printed in every issue).
@Suite("Hostile input fuzz", .timeLimit(.minutes(10)))
struct HostileInputFuzzTests {
    static let stableCodes: Set<String> = [
        "invalid-argument", "not-found", "already-exists", "permission-denied", "failed-precondition", "aborted",
        "resource-exhausted", "out-of-range", "unavailable", "unauthenticated", "cancelled", "deadline-exceeded", "unimplemented",
    ]

    /// What the fuzzer knows of the answers it got.
    struct Ledger {
        var appliedVersions: Set<UInt64> = []
        var errors = 0
        var unstableCodes: [String] = []
        /// Request ids whose write must not be applied (a mutation id reused with other content).
        var mustNotApply: Set<Int> = []
        var appliedAgain: [Int] = []

        mutating func record(_ message: ServerMessage) {
            switch message {
            case .ack(let id, let acknowledgements):
                for acknowledgement in acknowledgements where acknowledgement.status == .applied {
                    appliedVersions.insert(acknowledgement.version.rawValue)
                    if mustNotApply.contains(id) { appliedAgain.append(id) }
                }
                for acknowledgement in acknowledgements where acknowledgement.status == .refused {
                    check(acknowledgement.error?.code.rawValue ?? "none")
                }
            case .error(_, let error):
                errors += 1
                check(error.code.rawValue)
            default:
                break
            }
        }

        mutating func check(_ code: String) {
            if !HostileInputFuzzTests.stableCodes.contains(code) { unstableCodes.append(code) }
        }
    }

    /// Valid messages and bodies, which the fuzzer mutates.
    struct Generator {
        var random: SeededRandomNumberGenerator
        var nextID = 1
        var nextSequence: UInt64 = 1
        /// Mutation ids used, with the data they carried.
        var used: [(sequence: UInt64, n: Int)] = []

        mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }
        mutating func int(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }

        mutating func id() -> Int {
            defer { nextID += 1 }
            return nextID
        }

        mutating func mutation() -> String {
            let n = int(1_000)
            let sequence = nextSequence
            nextSequence += 1
            used.append((sequence, n))
            return #"{"op":"set","path":"fuzz/d\#(int(50))","data":{"n":\#(n),"s":"\#(String(repeating: "x", count: int(40)))"},"id":{"client":"fz","sequence":\#(sequence)}}"#
        }

        /// A message the server understands.
        mutating func valid() -> String {
            switch int(10) {
            case 0: return #"{"type":"get","id":\#(id()),"path":"fuzz/d\#(int(50))"}"#
            case 1 where chance(50): return #"{"type":"query","id":\#(id()),"target":{"collection":"fuzz","query":[{"where":"n","op":">=","value":\#(int(1_000))}]}}"#
            case 1: return #"{"type":"query","id":\#(id()),"target":{"collection":"fuzz","query":[{"or":[{"where":"n","op":"==","value":\#(int(1_000))},{"and":[{"where":"n","op":"<","value":\#(int(1_000))},{"where":"s","op":"!=","value":""}]}]}]}}"#
            case 2: return #"{"type":"heartbeat"}"#
            case 3: return #"{"type":"write","id":\#(id()),"atomic":false,"mutations":[\#(mutation()),\#(mutation())]}"#
            case 4 where chance(20): return #"{"type":"listen","id":\#(id()),"target":{"document":"fuzz/d\#(int(50))"}}"#
            case 4: return #"{"type":"unlisten","id":\#(int(nextID + 1))}"#
            case 5: return #"{"type":"hello","clientId":"again","protocol":\#(TandemVersion.wireProtocol)}"#
            default: return #"{"type":"write","id":\#(id()),"mutations":[\#(mutation())\#(chance(50) ? "," + mutation() : "")]}"#
            }
        }

        /// A JSON value of a wrong or awkward kind.
        mutating func awkwardValue() -> String {
            let values = ["null", "true", "1e999", "-0.0", "123456789012345678901234567890", "\"\\ud800\"", "[]", "{}", "\"\"",
                          "[[[[1]]]]", "{\"a\":{\"b\":{\"c\":null}}}", "-9223372036854775809", "\"\\u0000\"", "0.1e-400", "\"fuzz/../x\""]
            return values[int(values.count)]
        }

        /// One hostile frame (or body): a valid message mutated, or one of the known hard cases.
        mutating func hostile() -> [UInt8] {
            switch int(100) {
            case 0: return Array((String(repeating: "[", count: 100_000) + String(repeating: "]", count: chance(50) ? 100_000 : 3)).utf8)
            case 1: return Array((String(repeating: #"{"a":"#, count: 50_000) + "1" + String(repeating: "}", count: 50_000)).utf8)
            case 2: return [0xFF, 0xFE, 0x7B, 0x22, 0xC0, 0xAF, 0x22, 0x7D]
            case 3: return Array(#"{"type":"write","id":\#(id()),"mutations":[{"op":"set","path":"fuzz/u","data":{"s":"\#u{FFFD}"}}]}"#.utf8) + [0xED, 0xA0, 0x80]
            case 4: return Array(#"{"type":"frobnicate","id":\#(id())}"#.utf8)
            case 5: return Array(#"{"type":"write","id":\#(id()),"mutations":[],"extra":{"unknown":true}}"#.utf8)
            case 6:
                // A mutation id used before, with other content: never applied again.
                guard let (sequence, n) = used.isEmpty ? nil : used[int(used.count)] else { return Array(valid().utf8) }
                return Array(#"{"type":"write","id":\#(id()),"mutations":[{"op":"set","path":"fuzz/reused","data":{"n":\#(n + 1)},"id":{"client":"fz","sequence":\#(sequence)}}]}"#.utf8)
            case 7..<20:
                // A valid message with one value replaced by an awkward one.
                var text = valid()
                let colons = text.indices.filter { text[$0] == ":" }
                guard let colon = colons.isEmpty ? nil : colons[int(colons.count)] else { return Array(text.utf8) }
                let start = text.index(after: colon)
                let end = text[start...].firstIndex { $0 == "," || $0 == "}" } ?? text.endIndex
                text.replaceSubrange(start..<end, with: awkwardValue())
                return Array(text.utf8)
            default:
                var bytes = Array(valid().utf8)
                for _ in 0..<(1 + int(3)) {
                    guard !bytes.isEmpty else { break }
                    let at = int(bytes.count)
                    switch int(5) {
                    case 0: bytes.removeSubrange(at...)
                    case 1: bytes[at] ^= UInt8(1 << int(8))
                    case 2: bytes.insert([0x00, 0xFF, 0x22, 0x7B, 0x5D, 0x5C, 0xC3][int(7)], at: at)
                    case 3: bytes.removeSubrange(at..<min(bytes.count, at + 1 + int(8)))
                    default: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + 1 + int(16))], at: at)
                    }
                }
                return bytes
            }
        }
    }

    @Test("≥ 10,000 hostile frames and bodies, seeded: the server keeps answering, valid writes apply, nothing is written unanswered or partly, every error code is stable")
    func fuzz() async throws {
        let environment = ProcessInfo.processInfo.environment
        let total = environment["TANDEM_FUZZ_ITERATIONS"].flatMap { Int($0) } ?? 10_000
        let seed = environment["TANDEM_FUZZ_SEED"].flatMap { UInt64($0) } ?? 0x5EED_F022
        var generator = Generator(random: SeededRandomNumberGenerator(seed: seed))
        var configuration = SyncServerConfiguration()
        configuration.limits.maximumRequestBytes = 1 << 20
        // The rates are tested on their own; here they would only slow the run.
        configuration.limits.maximumMessagesPerSecond = 1 << 40
        configuration.limits.maximumWritesPerSecond = 1 << 40
        let server = try await LiveServer.start(configuration: configuration)
        var ledger = Ledger()
        var stream = RawStream(port: server.port)
        try #require(await stream.hello("fuzz-0"), "expected welcome (seed \(seed))")
        var sent = 0
        var burst = 0
        var reconnects = 0
        var malformed = 0

        while sent < total {
            burst += 1
            let size = min(500, total - sent)
            for _ in 0..<size {
                switch generator.int(100) {
                case 0..<8:
                    try await http(server, &generator, &ledger, seed: seed)
                case 8:
                    stream.sendBinary(Array(generator.valid().utf8))
                case 9 where generator.chance(10):
                    // One message in fragments over the size limit: refused, the session goes on.
                    let piece = [UInt8](repeating: 0x20, count: 600 << 10)
                    stream.sendFragments([Array(#"{"type":"get","id":1,"path":"#.utf8) + piece, piece + Array("\"a/b\"}".utf8)])
                default:
                    stream.sendBytes(generator.hostile())
                }
            }
            sent += size
            if burst % 4 == 0 {
                // A connection that talks before hello: each message is refused, none acted on.
                let early = RawStream(port: server.port)
                for _ in 0..<10 { early.sendBytes(generator.hostile()) }
                early.send(#"{"type":"write","id":999999,"mutations":[{"op":"set","path":"fuzz/early","data":{}}]}"#)
                // A mutated hello may still be one: then the write is answered as on any connection.
                var welcomed = false
                while let message = await early.next() {
                    ledger.record(message)
                    if case .welcome = message { welcomed = true }
                    if case .error(999999, let error) = message {
                        #expect(welcomed || error.code == .failedPrecondition, "seed \(seed)")
                        break
                    }
                    if case .ack(999999, _) = message {
                        #expect(welcomed, "a write before hello was applied (seed \(seed))")
                        break
                    }
                }
                malformed += early.malformed.value
                await early.close()
            }
            // The probe: a valid write of its own writer. Writes are answered in order, so once its
            // answer is here, every write of the burst has been answered.
            let probeID = 1_000_000_000 + burst
            var probed = false
            while !probed {
                stream.send(#"{"type":"write","id":\#(probeID),"mutations":[{"op":"set","path":"probe/p\#(burst)","data":{"burst":\#(burst)},"id":{"client":"probe-\#(burst)","sequence":1}}]}"#)
                while let message = await stream.next() {
                    ledger.record(message)
                    if case .ack(probeID, let acknowledgements) = message {
                        #expect(acknowledgements.first?.status == .applied, "seed \(seed), burst \(burst)")
                        probed = true
                        break
                    }
                }
                if !probed {
                    // The connection closed (a frame over the size limit does that): a new one must work.
                    reconnects += 1
                    malformed += stream.malformed.value
                    await stream.close()
                    stream = RawStream(port: server.port)
                    try #require(await stream.hello("fuzz-\(burst)"), "expected welcome after a closed connection (seed \(seed))")
                }
            }
            let current = try await server.store.currentVersion().rawValue
            #expect(ledger.appliedVersions == Set(current == 0 ? [] : Array(1...current)),
                    "every version in the store was acknowledged, and nothing else: seed \(seed), burst \(burst)")
            #expect(ledger.unstableCodes.isEmpty, "unstable codes \(ledger.unstableCodes), seed \(seed)")
            #expect(ledger.appliedAgain.isEmpty, "a reused mutation id applied again: \(ledger.appliedAgain), seed \(seed)")
            if !ledger.unstableCodes.isEmpty || !ledger.appliedAgain.isEmpty { break }
        }
        malformed += stream.malformed.value
        #expect(malformed == 0, "the server sent \(malformed) messages that are not valid (seed \(seed))")
        #expect(try await server.store.document(at: documentPath("probe/p\(burst)"))?.data["burst"] == .int(burst))
        #expect(ledger.errors > total / 4, "most hostile frames are answered with an error (\(ledger.errors))")
        #expect(reconnects < burst, "most bursts keep their connection (\(reconnects) reconnects in \(burst))")
        await stream.close()
        await server.stop()
    }

    /// One hostile HTTP request: a commit, a query or a document write with a mutated body.
    func http(_ server: LiveServer, _ generator: inout Generator, _ ledger: inout Ledger, seed: UInt64) async throws {
        let (method, path): (String, String) = switch generator.int(4) {
        case 0: ("POST", "/v1/query")
        case 1: ("PUT", "/v1/documents/fuzz/h\(generator.int(20))")
        default: ("POST", "/v1/commit")
        }
        var body: [UInt8]
        switch path {
        case "/v1/commit":
            body = Array(#"{"writes":[{"op":"set","path":"fuzz/h\#(generator.int(20))","data":{"n":\#(generator.int(100))}},{"op":"update","path":"fuzz/h\#(generator.int(20))","fields":{"m":1}}]}"#.utf8)
        case "/v1/query":
            body = generator.chance(50)
                ? Array(#"{"collection":"fuzz","query":[{"where":"n","op":"==","value":\#(generator.int(100))}]}"#.utf8)
                : Array(#"{"collection":"fuzz","query":[{"or":[{"where":"n","op":"==","value":\#(generator.int(100))},{"and":[{"where":"n","op":">","value":\#(generator.int(100))},{"where":"s","op":"in","value":["a",""]}]}]}]}"#.utf8)
        default:
            body = Array(#"{"n":\#(generator.int(100)),"nested":{"a":[1,2,3]}}"#.utf8)
        }
        if generator.chance(90) {
            let hostile = generator.hostile()
            body = generator.chance(50) ? hostile : Array(body.prefix(generator.int(body.count + 1))) + hostile.prefix(generator.int(8))
        }
        var request = URLRequest(url: URL(string: "\(server.url.absoluteString)\(path)")!)
        request.httpMethod = method
        request.httpBody = Data(body)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let answer = try? JSONText.parse(bytes: data)
        #expect(status < 500 && status > 0, "HTTP \(status) for \(method) \(path): \(String(decoding: data, as: UTF8.self)) (seed \(seed))")
        if status >= 400 {
            ledger.errors += 1
            ledger.check(answer?[field: "error"]?[field: "code"]?.stringValue ?? "no code")
            return
        }
        // Applied writes: their versions.
        if path == "/v1/commit", case .array(let results)? = answer?[field: "results"] {
            for result in results where result[field: "status"]?.stringValue == "applied" {
                if case .int(let version)? = result[field: "version"] { ledger.appliedVersions.insert(UInt64(version)) }
            }
        } else if method == "PUT", case .int(let version)? = answer?[field: "version"] {
            ledger.appliedVersions.insert(UInt64(version))
        }
    }
}
