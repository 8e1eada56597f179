import Foundation
import Synchronization
import TandemCore
import TandemServer

/// What one node's notification on ``PostgresServerStore/channel`` says. Its payload starts with
/// the node's name and a colon; then `here` (the node is there), or the newest version its commit
/// made; for a commit small enough, a line break and the commit itself follow, so other nodes tell
/// it without reading the commit log (``CommitNotification/commit``).
enum CommitNotification: Sendable, Equatable {
    /// The node is there (each poll says so).
    case presence(sender: Substring)
    /// The node committed: read the commit log.
    case wake(sender: Substring)
    /// The node committed the versions the range holds, whole.
    case commit(sender: Substring, CommittedRange)

    /// The node that sent it.
    var sender: Substring {
        switch self {
        case .presence(let sender), .wake(let sender), .commit(let sender, _): sender
        }
    }

    /// A commit carried whole in its notification: the versions after `from` through `through`,
    /// which wrote `changes` (in version order, as the commit log holds them).
    struct CommittedRange: Sendable, Equatable {
        var from: Version
        var through: Version
        var changes: [RemoteChange]
    }

    /// PostgreSQL's limit on a payload is 8,000 bytes; a commit whose payload would come near it
    /// is announced as a wake-up, and other nodes read it from the commit log.
    static let payloadLimit = 7_900

    /// The payload of a commit by `node` of the versions after `from` through `through`, with the
    /// commit log's rows it wrote: the commit itself when it fits, else a wake-up.
    static func payload(node: String, from: Version, through: Version, rows: Flush.Log) -> String {
        let head = "\(node):\(through.rawValue)"
        var writer = WireWriter(capacity: 256)
        writer.raw(unescaped: head)
        writer.raw("\n[")
        writer.int(Int(from.rawValue))
        for index in rows.paths.indices {
            writer.raw(",[")
            writer.string(rows.paths[index])
            writer.raw(",")
            writer.int(Int(rows.versions[index]))
            writer.raw(",")
            writer.int(Int(rows.created[index]))
            writer.raw(",")
            writer.int(Int(rows.updated[index]))
            writer.raw(",")
            if rows.live[index] { writer.raw(unescaped: rows.data[index]) } else { writer.raw("null") }
            if rows.hasWriter[index] {
                writer.raw(",")
                writer.string(rows.writerClients[index])
                writer.raw(",")
                writer.int(Int(rows.writerSequences[index]))
            }
            writer.raw("]")
            if writer.bytes.count > payloadLimit { return head }
        }
        writer.raw("]")
        return writer.bytes.count > payloadLimit ? head : writer.text
    }

    /// What `payload` says; nil when `ignoring` sent it (a node hears its own notifications), or
    /// it is none of this (another program's notification on the channel). A commit whose body
    /// cannot be read is a wake-up: the commit log has it.
    init?(payload: String, ignoring node: String) {
        let newline = payload.firstIndex(of: "\n")
        let head = payload[..<(newline ?? payload.endIndex)]
        guard let colon = head.lastIndex(of: ":") else { return nil }
        let sender = head[..<colon]
        guard sender != node else { return nil }
        let tail = head[head.index(after: colon)...]
        if tail == PostgresServerStore.presence.dropFirst() {
            self = .presence(sender: sender)
            return
        }
        guard let through = UInt64(tail) else { return nil }
        guard let newline else {
            self = .wake(sender: sender)
            return
        }
        guard let range = Self.range(payload[payload.index(after: newline)...], through: Version(through)) else {
            self = .wake(sender: sender)
            return
        }
        self = .commit(sender: sender, range)
    }

    /// The commit a payload's body holds: `[from, [path, version, created, updated, data or
    /// null, writer client, writer sequence], …]`, the writer's two only when it has one.
    private static func range(_ body: Substring, through: Version) -> CommittedRange? {
        guard case .array(let items)? = try? JSONText.parse(String(body)), case .int(let from)? = items.first, from >= 0,
              UInt64(from) < through.rawValue else { return nil }
        var changes: [RemoteChange] = []
        for item in items.dropFirst() {
            guard case .array(let cells) = item, cells.count == 5 || cells.count == 7,
                  case .string(let text) = cells[0], let path = DocumentPath(trusted: text),
                  case .int(let rawVersion) = cells[1], rawVersion > from, UInt64(rawVersion) <= through.rawValue,
                  case .int(let created) = cells[2], case .int(let updated) = cells[3] else { return nil }
            let version = Version(UInt64(rawVersion))
            var id: MutationID?
            if cells.count == 7 {
                guard case .string(let client) = cells[5], case .int(let sequence) = cells[6] else { return nil }
                id = MutationID(clientID: client, sequence: UInt64(bitPattern: Int64(sequence)))
            }
            switch cells[4] {
            case .null:
                changes.append(RemoteChange(path: path, document: nil, version: version, mutationID: id))
            case .object(let data):
                let document = Document(path: path, data: data, version: version,
                                        createTime: WireTimestamp.date(milliseconds: Int64(created)),
                                        updateTime: WireTimestamp.date(milliseconds: Int64(updated)))
                changes.append(RemoteChange(path: path, document: document, version: version, mutationID: id))
            default:
                return nil
            }
        }
        guard zip(changes, changes.dropFirst()).allSatisfy({ $0.version <= $1.version }) else { return nil }
        return CommittedRange(from: Version(UInt64(from)), through: through, changes: changes)
    }
}

/// What other nodes' notifications brought, until a catch-up takes it (``PostgresServerStore/catchUp()``).
struct HeardCommits: Sendable {
    /// A catch-up waits in the drain's queue.
    var queued = false
    /// Commits carried whole in notifications, in the order they came (the order they committed).
    var commits: [CommitNotification.CommittedRange] = []
    /// Whether the next catch-up must read the commit log: a wake-up, a poll, a node heard anew, or
    /// more commits than kept here, asked for it. True at first: a node reads when it starts.
    var readWanted = true
    /// When the earliest notification not yet taken came.
    var woken: ContinuousClock.Instant?

    /// The most commits kept for the next catch-up: past it, they are dropped and it reads them.
    static let limit = 4_096

    /// Keeps `range` for the next catch-up.
    mutating func keep(_ range: CommitNotification.CommittedRange) {
        if commits.count >= Self.limit {
            commits.removeAll()
            readWanted = true
        } else {
            commits.append(range)
        }
    }

    /// Takes what the next catch-up tells: the changes of the commits that follow `told` one after
    /// the other, the version they reach, and whether it must read the log after that (a commit
    /// left a gap before it, or a read was asked for).
    mutating func take(after told: Version) -> (changes: [RemoteChange], through: Version, read: Bool, woken: ContinuousClock.Instant?) {
        var changes: [RemoteChange] = []
        var through = told
        var read = readWanted
        for range in commits where range.through > through {
            guard range.from == through else {
                read = true
                break
            }
            changes += range.changes
            through = range.through
        }
        commits.removeAll()
        readWanted = false
        defer { woken = nil }
        return (changes, through, read, woken)
    }
}
