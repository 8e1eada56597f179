import Foundation
import HummingbirdWebSocket
import Testing
import TandemCore
@testable import TandemServer

/// `docs/PROTOCOL.md` against the code: every error code with the HTTP status the server answers
/// it with, every reason, and every limit with the value the server uses. A client is written from
/// that page; when it drifts, a client drops writes it should have sent again.
@Suite("Protocol document")
struct ProtocolDocumentTests {
    static let document: String = {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/PROTOCOL.md")
        return (try? String(contentsOf: url, encoding: .utf8)) ?? ""
    }()

    /// The rows of the first table after `heading`, each as its cells.
    static func table(after heading: String, skipping tables: Int = 0) -> [[String]] {
        guard let start = document.range(of: "\n\(heading)\n") else { return [] }
        var rows: [[String]] = []
        var seen = 0
        var inTable = false
        for line in document[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") { break }
            guard line.hasPrefix("|") else {
                if inTable {
                    if seen > tables { break }
                    inTable = false
                }
                continue
            }
            if !inTable {
                inTable = true
                seen += 1
            }
            guard seen == tables + 1 else { continue }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast().map { $0.trimmingCharacters(in: .whitespaces) }
            if cells.allSatisfy({ $0.allSatisfy { $0 == "-" } }) { continue }
            rows.append(cells)
        }
        return Array(rows.dropFirst())
    }

    /// The text between backticks in `cell`.
    static func backticked(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    @Test("§8 lists every error code, each with the status the HTTP API answers it with; the reasons table lists every reason")
    func errorCodes() {
        let rows = Self.table(after: "## 8. Errors")
        #expect(!rows.isEmpty, "no table of codes")
        var documented: Set<String> = []
        for row in rows {
            for code in Self.backticked(row[0]) {
                documented.insert(code)
                let status = HTTPAPI.status(for: TandemError.Code(rawValue: code)).code
                #expect(row[3].contains(String(status)), "\(code) is answered \(status), the document says \(row[3])")
            }
        }
        #expect(documented == Set(TandemError.Code.all.map(\.rawValue)), "documented \(documented.sorted()), the code has \(TandemError.Code.all.map(\.rawValue))")
        // A rate refusal: resource-exhausted with retryAfter, 429 over HTTP.
        let rate = TandemError(.resourceExhausted, "", retryAfter: .seconds(1))
        #expect(HTTPAPI.errorResponse(rate).status.code == 429)
        #expect(rows.first { $0[0] == "`resource-exhausted`" }.map { $0[1].contains("retryAfter") && $0[3].contains("429") } == true)
        let reasons = Self.table(after: "## 8. Errors", skipping: 1)
        #expect(Set(reasons.flatMap { Self.backticked($0[0]) }) == Set(TandemError.allReasons))
    }

    @Test("§9 gives every limit the value the server uses, and every limit the server has is there")
    func limits() {
        let rows = Self.table(after: "## 9. Limits and timeouts")
        #expect(!rows.isEmpty, "no table of limits")
        let limits = ServerLimits()
        let configuration = SyncServerConfiguration()
        var values: [String: Any] = [:]
        for child in Mirror(reflecting: limits).children { if let label = child.label { values[label] = child.value } }
        for child in Mirror(reflecting: configuration).children { if let label = child.label { values[label] = child.value } }
        let checked: Set<String> = Set(Mirror(reflecting: limits).children.compactMap(\.label)).union([
            "heartbeatInterval", "maximumQueuedBytesPerConnection", "idleTimeout", "requestHeadTimeout", "requestBodyTimeout", "maximumConnections",
        ])
        let decoder = HTTP1WebSocketUpgradeChannel.Configuration().http1.httpDecoder
        // Rows whose value is derived rather than a setting of its own.
        let derived: [String: String] = [
            "a WebSocket frame": "\(Self.bytes(limits.maximumRequestBytes)) + \(Self.bytes(SyncServer.maximumIncomingFrameBytes(limits) - limits.maximumRequestBytes))",
            "a frame the server sends": Self.bytes(SyncServer.outgoingFrameBytes),
            "silence on a WebSocket": "three heartbeat intervals (\(Self.format(configuration.heartbeatInterval * 3)))",
            "a request's head (request line and headers)": "\(Self.bytes(decoder.maxHeaderListSize)), \(Self.count(decoder.maxHeaderFieldCount)) headers",
            "changes in one page of a change feed (a `fetch`'s or `/v1/changes`' `limit`)": Self.count(SyncService.maximumChangesPerPage),
        ]
        var named: Set<String> = []
        for row in rows {
            if let name = Self.backticked(row[0]).last, let value = values[name] {
                named.insert(name)
                #expect(row[1] == Self.format(value, named: name), "\(name): the server uses \(Self.format(value, named: name)), the document says \(row[1])")
            } else if let expected = derived[row[0]] {
                #expect(row[1] == expected, "\(row[0]): \(expected), the document says \(row[1])")
            } else {
                Issue.record("the row '\(row[0])' names no limit of the server's")
            }
            for code in Self.backticked(row[2]) where code.contains("-") && code == code.lowercased() {
                #expect(TandemError.Code.all.map(\.rawValue).contains(code), "\(row[0]): unknown code \(code)")
            }
        }
        #expect(named == checked, "limits missing from the document: \(checked.subtracting(named).sorted())")
    }

    static func format(_ value: Any, named name: String = "") -> String {
        if let duration = value as? Duration { return "\(duration.components.seconds) s" }
        if let int = value as? Int { return name.contains("Bytes") ? bytes(int) : count(int) }
        return "\(value)"
    }

    static func bytes(_ value: Int) -> String {
        if value % (1 << 20) == 0 { return "\(value >> 20) MiB" }
        if value % (1 << 10) == 0 { return "\(value >> 10) KiB" }
        return "\(count(value)) bytes"
    }

    static func count(_ value: Int) -> String {
        let digits = Array(String(value))
        var text = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { text.append(",") }
            text.append(digit)
        }
        return text
    }
}
