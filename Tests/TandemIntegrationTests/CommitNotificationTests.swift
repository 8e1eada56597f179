import Foundation
import Testing
import TandemCore
@testable import TandemPostgres
import TandemServer

/// The notifications nodes on one PostgreSQL database send each other, read and written without
/// a database.
@Suite("Commit notifications")
struct CommitNotificationTests {
    static let created = Date(timeIntervalSince1970: 1_700_000_000)
    static let updated = Date(timeIntervalSince1970: 1_700_000_100)

    /// The commit log's rows of a commit of versions 8 and 9: a document written by a client's
    /// write, then the same document deleted by a write without an id.
    static func rows() -> Flush.Log {
        var log = Flush.Log()
        for (version, live) in [(Int64(8), true), (9, false)] {
            log.paths.append("c/d \"quoted\"")
            log.versions.append(version)
            log.created.append(WireTimestamp.milliseconds(created))
            log.updated.append(WireTimestamp.milliseconds(updated))
            log.live.append(live)
            log.data.append(live ? #"{"k":[1,2.5,"x\ny"],"n":null}"# : "")
            log.hasWriter.append(live)
            log.writerClients.append(live ? "w\u{e9}" : "")
            log.writerSequences.append(live ? 42 : 0)
        }
        return log
    }

    @Test("a commit's notification carries its rows, and reads back as the changes the commit log holds")
    func roundTrip() throws {
        let payload = CommitNotification.payload(node: "A", from: Version(7), through: Version(9), rows: Self.rows())
        let path = try DocumentPath("c/d \"quoted\"")
        let document = Document(path: path, data: ["k": [1, 2.5, "x\ny"], "n": .null], version: Version(8), createTime: Self.created, updateTime: Self.updated)
        let expected = CommitNotification.CommittedRange(from: Version(7), through: Version(9), changes: [
            RemoteChange(path: path, document: document, version: Version(8), mutationID: MutationID(clientID: "w\u{e9}", sequence: 42)),
            RemoteChange(path: path, document: nil, version: Version(9)),
        ])
        #expect(CommitNotification(payload: payload, ignoring: "B") == .commit(sender: "A", expected))
        #expect(CommitNotification(payload: payload, ignoring: "A") == nil, "a node skips its own")
    }

    @Test("presence, a wake-up, another program's notification and a body that cannot be read")
    func otherPayloads() {
        #expect(CommitNotification(payload: "A:here", ignoring: "B") == .presence(sender: "A"))
        #expect(CommitNotification(payload: "A:12", ignoring: "B") == .wake(sender: "A"))
        #expect(CommitNotification(payload: "hello", ignoring: "B") == nil)
        #expect(CommitNotification(payload: "A:twelve", ignoring: "B") == nil)
        // Whatever is wrong with the body, the commit log has the commit: a wake-up.
        #expect(CommitNotification(payload: "A:5\n" + #"[3,["c/d",4,0,0,{}]]"#, ignoring: "B")?.sender == "A")
        for body in ["[", "{}", "[12]", #"[3,["c/d",2,0,0,{}]]"#, #"[3,["c/d",6,0,0,{}]]"#, #"[3,["c",4,0,0,{}]]"#,
                     #"[3,["c/d",4,0,0,[]]]"#, #"[3,["c/d",4,0,0,{},"w"]]"#, #"[3,["c/d",5,0,0,{}],["c/e",4,0,0,{}]]"#] {
            #expect(CommitNotification(payload: "A:5\n" + body, ignoring: "B") == .wake(sender: "A"), "\(body)")
        }
    }

    @Test("a commit too large for PostgreSQL's 8,000-byte payload is announced as a wake-up")
    func largeCommitWakes() {
        var rows = Self.rows()
        rows.data[0] = #"{"s":""# + String(repeating: "x", count: 8_000) + #""}"#
        let payload = CommitNotification.payload(node: "A", from: Version(7), through: Version(9), rows: rows)
        #expect(payload == "A:9")
        var many = Flush.Log()
        for index in 0..<500 {
            many.paths.append("c/d\(index)")
            many.versions.append(8)
            many.created.append(0)
            many.updated.append(0)
            many.live.append(true)
            many.data.append(#"{"n":1}"#)
            many.hasWriter.append(false)
            many.writerClients.append("")
            many.writerSequences.append(0)
        }
        #expect(CommitNotification.payload(node: "A", from: Version(7), through: Version(8), rows: many) == "A:8")
    }

    static func range(_ from: UInt64, _ through: UInt64) throws -> CommitNotification.CommittedRange {
        CommitNotification.CommittedRange(from: Version(from), through: Version(through),
                                          changes: [RemoteChange(path: try DocumentPath("c/v\(through)"), document: nil, version: Version(through))])
    }

    @Test("a catch-up tells the commits that follow what the node told, one after the other, and reads the log after a gap or when asked to")
    func catchUpTakesWhatFollows() throws {
        var heard = HeardCommits()
        #expect(heard.take(after: .zero).read, "a node reads when it starts")
        heard.keep(try Self.range(3, 4))
        heard.keep(try Self.range(4, 6))
        var taken = heard.take(after: Version(3))
        #expect(taken.changes.map(\.version) == [Version(4), Version(6)] && taken.through == Version(6) && !taken.read)
        // Already told (the node's own commit read it first), then one that follows, then a gap.
        heard.keep(try Self.range(5, 6))
        heard.keep(try Self.range(6, 7))
        heard.keep(try Self.range(8, 9))
        heard.keep(try Self.range(9, 10))
        taken = heard.take(after: Version(6))
        #expect(taken.changes.map(\.version) == [Version(7)] && taken.through == Version(7) && taken.read)
        #expect(heard.commits.isEmpty)
        heard.readWanted = true
        taken = heard.take(after: Version(10))
        #expect(taken.changes.isEmpty && taken.through == Version(10) && taken.read)
        // More than it keeps: it drops them, and reads.
        for version in 0..<UInt64(HeardCommits.limit + 1) { heard.keep(try Self.range(10 + version, 11 + version)) }
        taken = heard.take(after: Version(10))
        #expect(taken.read && taken.through < Version(UInt64(11 + HeardCommits.limit)))
    }
}
