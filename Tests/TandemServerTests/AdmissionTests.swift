import Testing
import TandemCore
@testable import TandemServer

/// The admission step's tables and counters, on a clock that stands still: the LRU table the rate
/// buckets live in, anonymous callers grouped by address (IPv6 by /64), and a connection's reads
/// in flight.
@Suite("Admission")
struct AdmissionTests {
    @Test("a full LRU table makes room by forgetting the least recently used key; an update, not a peek, makes a key recent")
    func lruEviction() {
        var table = LRUTable<String, Int>(capacity: 3)
        for key in ["a", "b", "c"] { table.update(key, default: 0) { $0 += 1 } }
        #expect(table.keysByRecency == ["a", "b", "c"])
        table.update("a", default: 0) { $0 += 1 }
        #expect(table.peek("b") == 1)
        #expect(table.keysByRecency == ["b", "c", "a"], "a peek is not a use")
        table.update("d", default: 0) { $0 += 1 }
        #expect(table.count == 3 && table.peek("b") == nil, "b, the least recently used, made room")
        #expect(table.keysByRecency == ["c", "a", "d"])
        #expect(table.peek("a") == 2, "a kept its value")
        table.update("b", default: 10) { $0 += 1 }
        #expect(table.peek("b") == 11, "a forgotten key starts again from its default")
        #expect(table.peek("c") == nil && table.keysByRecency == ["a", "d", "b"])
        // The most recently used key, used again, stays last.
        let count = table.update("b", default: 0) { (uses: inout Int) -> Int in
            uses += 1
            return uses
        }
        #expect(count == 12 && table.keysByRecency == ["a", "d", "b"])

        var single = LRUTable<String, Int>(capacity: 1)
        single.update("a", default: 1) { _ in }
        single.update("b", default: 2) { _ in }
        #expect(single.keysByRecency == ["b"] && single.peek("a") == nil && single.peek("b") == 2)
    }

    @Test("past 65,536 callers the write and read buckets of the least recently seen are forgotten, never a busy caller's: an emptied bucket stays empty while a crowd comes and goes")
    func bucketsSurviveChurn() {
        var limits = ServerLimits()
        limits.maximumWritesPerSecondPerUser = 2
        limits.maximumHTTPReadsPerSecondPerUser = 2
        // Time stands still: nothing refills.
        let admission = Admission(limits: limits, now: { .zero })
        let capacity = Admission.maximumTrackedCallers
        let ada = Admission.Caller.user("ada")
        func other(_ index: Int) -> Admission.Caller { .user("caller-\(index)") }

        #expect(admission.admitWrites(2, for: ada) == nil)
        #expect(admission.admitRead(for: ada) == nil && admission.admitRead(for: ada) == nil)
        #expect(admission.admitWrites(1, for: ada) != nil && admission.admitRead(for: ada) != nil)
        // The tables fill up behind Ada, who is now the least recently seen.
        for index in 0..<(capacity - 1) {
            let caller = other(index)
            _ = admission.admitWrites(2, for: caller)
            _ = admission.admitRead(for: caller)
        }
        // Ada comes back: still refused, her buckets kept; and now the most recently seen.
        #expect(admission.admitWrites(1, for: ada)?.retryAfter == .milliseconds(500))
        #expect(admission.admitRead(for: ada)?.retryAfter == .milliseconds(500))
        // Ten callers more than the tables hold: the ten seen least recently make room.
        for index in (capacity - 1)..<(capacity + 9) {
            let caller = other(index)
            _ = admission.admitWrites(2, for: caller)
            _ = admission.admitRead(for: caller)
        }
        #expect(admission.admitWrites(1, for: ada)?.code == .resourceExhausted, "a busy caller's emptied write bucket survives the crowd")
        #expect(admission.admitRead(for: ada)?.code == .resourceExhausted, "and its read bucket")
        #expect(admission.admitWrites(2, for: other(0)) == nil, "the least recently seen was forgotten: its bucket starts full")
        #expect(admission.admitRead(for: other(0)) == nil && admission.admitRead(for: other(0)) == nil)
        #expect(admission.admitWrites(1, for: other(capacity - 2)) != nil, "a caller seen lately is remembered")
        #expect(admission.admitRead(for: other(capacity - 2)) == nil && admission.admitRead(for: other(capacity - 2)) != nil)
    }

    @Test("an anonymous caller counts as its address: IPv4 as it is, IPv6 by its /64, an IPv4-mapped IPv6 address as the IPv4 address, anything else as it is")
    func addressGroups() {
        let cases: [(address: String, group: String)] = [
            ("203.0.113.7", "203.0.113.7"),
            ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
            ("2001:0DB8:0001:0002:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
            ("[2001:db8:1:2::9]", "2001:db8:1:2::/64"),
            ("fe80::1%eth0", "fe80:0:0:0::/64"),
            ("::1", "0:0:0:0::/64"),
            ("::", "0:0:0:0::/64"),
            ("2001:db8::", "2001:db8:0:0::/64"),
            ("1:2:3:4:5:6:7::", "1:2:3:4::/64"),
            ("::ffff:203.0.113.7", "203.0.113.7"),
            ("::FFFF:cb00:7107", "203.0.113.7"),
            ("64:ff9b::203.0.113.7", "64:ff9b:0:0::/64"),
            // Not IP addresses: kept as they are.
            ("2001:db8:1:2:3:4:5:6:7", "2001:db8:1:2:3:4:5:6:7"),
            ("1:2:3:4:5:6:7:8::", "1:2:3:4:5:6:7:8::"),
            ("2001:db8::1::2", "2001:db8::1::2"),
            (":1:2:3:4:5:6:7", ":1:2:3:4:5:6:7"),
            ("1:2:3:4:5:6:7:", "1:2:3:4:5:6:7:"),
            ("12345::1", "12345::1"),
            ("::ffff:1.2.3.256", "::ffff:1.2.3.256"),
            ("1.2.3.4::", "1.2.3.4::"),
            ("localhost", "localhost"),
        ]
        for (address, group) in cases {
            #expect(Admission.Caller.group(of: address) == group, "\(address)")
        }
    }

    @Test("anonymous callers in one IPv6 /64 share a connection count, a write bucket and a read bucket; another /64 has its own; an IPv4-mapped address shares its IPv4 address's")
    func ipv6Prefixes() throws {
        var limits = ServerLimits()
        limits.maximumConnectionsPerAddress = 1
        limits.maximumWritesPerSecondPerUser = 1
        limits.maximumHTTPReadsPerSecondPerUser = 1
        let admission = Admission(limits: limits, now: { .zero })
        let home = Principal(device: "a", address: "2001:db8:1:2::1")
        let sameHome = Principal(device: "b", address: "2001:db8:1:2:ffff:ffff:ffff:fffe")
        let neighbour = Principal(device: "c", address: "2001:db8:1:3::1")
        #expect(home.caller == .address("2001:db8:1:2::/64") && sameHome.caller == home.caller)

        #expect(admission.admitWrites(1, from: home) == nil)
        let refusal = admission.admitWrites(1, from: sameHome)
        #expect(refusal?.code == .resourceExhausted && refusal?.message.contains("2001:db8:1:2::/64") == true, "\(String(describing: refusal))")
        #expect(admission.admitWrites(1, from: neighbour) == nil)

        #expect(admission.admitRead(from: home) == nil)
        #expect(admission.admitRead(from: sameHome)?.retryAfter == .seconds(1))
        #expect(admission.admitRead(from: neighbour) == nil)

        _ = try admission.seat(home)
        #expect(throws: TandemError.self) { try admission.seat(sameHome) }
        _ = try admission.seat(neighbour)
        #expect(admission.openConnections(of: .address("2001:db8:1:2::/64")) == 1)

        let ipv4 = Principal(device: "d", address: "203.0.113.7")
        let mapped = Principal(device: "e", address: "::ffff:203.0.113.7")
        #expect(mapped.caller == .address("203.0.113.7"))
        #expect(admission.admitWrites(1, from: ipv4) == nil)
        #expect(admission.admitWrites(1, from: mapped)?.code == .resourceExhausted, "one bucket for both spellings")
    }

    @Test("a connection's reads in flight: admitted up to the cap, the next refused at once with resource-exhausted and retryAfter and not counted, room again once one ends")
    func readsInFlight() {
        var limits = ServerLimits()
        limits.maximumReadsInFlightPerConnection = 2
        let admission = Admission(limits: limits, now: { .zero })
        var connection = Admission.ConnectionCounters(limits: limits)
        #expect(admission.admitRead(on: &connection) == nil)
        #expect(admission.admitRead(on: &connection) == nil)
        let refusal = admission.admitRead(on: &connection)
        #expect(refusal?.code == .resourceExhausted && refusal?.retryAfter == Admission.readsInFlightRetryAfter)
        #expect(refusal?.message.contains("2 reads under way") == true, "\(String(describing: refusal))")
        #expect(connection.readsInFlight == 2, "a refused read is not counted")
        admission.readEnded(on: &connection)
        #expect(admission.admitRead(on: &connection) == nil)
        #expect(admission.admitRead(on: &connection) != nil)
        for _ in 0..<3 { admission.readEnded(on: &connection) }
        #expect(connection.readsInFlight == 0, "never below zero")
    }
}
