import Foundation
import Testing
@testable import TandemCore

@Suite("Mutations and transforms")
struct MutationTests {
    let path = try! DocumentPath("users/ada")
    let time = ServerTime(Date(timeIntervalSince1970: 1_800_000_000.5))

    func existing(_ data: JSONObject, version: Version = 3) -> Document {
        Document(path: path, data: data, version: version, createTime: Date(timeIntervalSince1970: 1))
    }

    @Test("set replaces, merge merges nested maps, update sets field paths")
    func kinds() throws {
        let current = existing(["name": "Ada", "address": ["city": "London", "zip": "N1"], "age": 36])
        let set = try Mutation.set(path, ["name": "Grace"]).apply(to: current, version: 4, serverTime: time)
        #expect(set?.data == ["name": "Grace"])
        #expect(set?.version == 4)
        #expect(set?.createTime == current.createTime)
        #expect(set?.updateTime == time.date)

        let merged = try Mutation.merge(path, ["address": ["city": "Paris"], "x": 1]).apply(to: current, version: 4, serverTime: time)
        #expect(merged?.data == ["name": "Ada", "address": ["city": "Paris", "zip": "N1"], "age": 36, "x": 1])

        let masked = try Mutation.merge(path, ["address": ["city": "Paris"], "age": 40], fields: ["address.city", "name"])
            .apply(to: current, version: 4, serverTime: time)
        #expect(masked?.data == ["address": ["city": "Paris", "zip": "N1"], "age": 36])

        let updated = try Mutation.update(path, fields: ["address.zip": "E1", "age": 37]).apply(to: current, version: 4, serverTime: time)
        #expect(updated?.data == ["name": "Ada", "address": ["city": "London", "zip": "E1"], "age": 37])

        #expect(try Mutation.delete(path).apply(to: current, version: 4, serverTime: time) == nil)
        let created = try Mutation.set(path, ["a": 1]).apply(to: nil, version: 9, serverTime: time)
        #expect(created?.createTime == time.date)
    }

    @Test("update of a missing document is not-found; preconditions are failed-precondition")
    func preconditions() throws {
        #expect(throws: TandemError(.notFound, "Cannot update users/ada: no such document. Use set (or set with merge) to create it.")) {
            try Mutation.update(path, fields: ["a": 1]).apply(to: nil, version: 1, serverTime: time)
        }
        let current = existing(["a": 1], version: 5)
        for (mutation, doc) in [
            (Mutation.set(path, [:]).requiring(.exists(false)), current),
            (Mutation.set(path, [:]).requiring(.exists(true)), nil),
            (Mutation.set(path, [:]).requiring(.version(4)), current),
            (Mutation.set(path, [:]).requiring(.version(1)), nil),
        ] as [(Mutation, Document?)] {
            do {
                _ = try mutation.apply(to: doc, version: 6, serverTime: time)
                Issue.record("precondition should fail: \(mutation)")
            } catch {
                #expect(error.code == .failedPrecondition)
            }
        }
        #expect(try Mutation.set(path, ["b": 2]).requiring(.version(5)).apply(to: current, version: 6, serverTime: time)?.data == ["b": 2])
        #expect(try Mutation.set(path, ["b": 2]).requiring(.version(.zero)).apply(to: nil, version: 6, serverTime: time) != nil)
    }

    @Test("transforms: increment keeps ints, delete removes, arrays union and remove, server time")
    func transforms() throws {
        let current = existing(["n": 1, "d": 1.5, "tags": ["a", "b"], "gone": true, "big": .int(.max)])
        let result = try Mutation.update(path, fields: [:], transforms: [
            .init("n", .increment(2)),
            .init("d", .increment(1)),
            .init("fresh", .increment(.double(0.5))),
            .init("gone", .delete),
            .init("tags", .arrayUnion(["b", "c", "c"])),
            .init("other", .arrayRemove(["x"])),
            .init("at", .serverTimestamp),
            .init("big", .increment(1)),
        ]).apply(to: current, version: 4, serverTime: time)
        let data = try #require(result?.data)
        #expect(data["n"] == .int(3))
        #expect(data["d"] == .double(2.5))
        #expect(data["fresh"] == .double(0.5))
        #expect(data["gone"] == nil)
        #expect(data["tags"] == ["a", "b", "c"])
        #expect(data["other"] == [])
        #expect(data["at"] == "2027-01-15T08:00:00.500Z")
        #expect(data["big"] == .int(.max))
    }

    @Test("transforms in a set take their base from the current document")
    func setTransformsUseCurrentValue() throws {
        let result = try Mutation.set(path, ["name": "x"], transforms: [.init("count", .increment(1))])
            .apply(to: existing(["count": 5]), version: 4, serverTime: time)
        #expect(result?.data == ["name": "x", "count": 6])
    }

    @Test("malformed writes are invalid-argument", arguments: [
        Mutation.update(try! DocumentPath("users/ada"), fields: [:]),
        Mutation.update(try! DocumentPath("users/ada"), fields: ["a": 1, "a.b": 2]),
        Mutation.update(try! DocumentPath("users/ada"), fields: ["a": 1], transforms: [.init("a", .increment(1))]),
        Mutation.update(try! DocumentPath("users/ada"), fields: [:], transforms: [.init("a", .increment("x"))]),
        Mutation.set(try! DocumentPath("users/ada"), [:], transforms: [.init("a..b", .delete)]),
    ])
    func invalid(mutation: Mutation) {
        do {
            _ = try mutation.apply(to: existing(["a": ["b": 1]]), version: 4, serverTime: time)
            Issue.record("expected invalid-argument")
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test("increment commutes over seeded random operands", arguments: [11, 12, 13] as [UInt64])
    func incrementCommutes(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        for _ in 0..<500 {
            func number() -> JSONValue {
                Bool.random(using: &rng) ? .int(Int.random(in: -1_000...1_000, using: &rng)) : .double(Double(Int.random(in: -400...400, using: &rng)) / 4)
            }
            let base: JSONValue? = Int.random(in: 0..<4, using: &rng) == 0 ? nil : number()
            let a = FieldTransform.increment(number())
            let b = FieldTransform.increment(number())
            let ab = b.apply(to: a.apply(to: base, serverTime: time), serverTime: time)
            let ba = a.apply(to: b.apply(to: base, serverTime: time), serverTime: time)
            #expect(ab == ba, "base \(String(describing: base)), \(a), \(b)")
        }
    }

    @Test("arrayUnion is idempotent and arrayRemove removes every copy", arguments: [21, 22, 23] as [UInt64])
    func arrayUnionIdempotent(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        for _ in 0..<500 {
            let base: JSONValue = .array((0..<Int.random(in: 0...5, using: &rng)).map { _ in Generate.value(&rng) })
            let elements = (0..<Int.random(in: 0...4, using: &rng)).map { _ in Generate.value(&rng) }
            let once = FieldTransform.arrayUnion(elements).apply(to: base, serverTime: time)
            let twice = FieldTransform.arrayUnion(elements).apply(to: once, serverTime: time)
            #expect(once == twice)
            for element in elements {
                #expect(once?.arrayValue?.contains { JSONValue.queryEquals($0, element) } == true)
            }
            let removed = FieldTransform.arrayRemove(elements).apply(to: once, serverTime: time)
            for element in elements {
                #expect(removed?.arrayValue?.contains { JSONValue.queryEquals($0, element) } == false)
            }
        }
    }

    @Test("a mutation with its id round-trips through Codable")
    func codable() throws {
        let mutation = Mutation.update(path, fields: ["a.b": 1], transforms: [.init("n", .increment(1))])
            .requiring(.version(3))
            .identified(by: MutationID(clientID: "c1", sequence: 7))
        let decoded = try JSONDecoder().decode(Mutation.self, from: JSONEncoder().encode(mutation))
        #expect(decoded == mutation)
    }

    @Test("a mutation's content digest is the same in every process and version, ignores its id and key order, and tells writes apart")
    func contentDigest() throws {
        let write = Mutation.set(path, ["name": "Ada", "tags": ["a", "b"], "n": 1, "x": 1.5], transforms: [.init("seen", .serverTimestamp)])
        // Pinned: stores keep digests, so the algorithm must never change.
        #expect(write.contentDigest == 0xb38e_b669_4214_e3c6)
        #expect(write.identified(by: MutationID(clientID: "c", sequence: 9)).contentDigest == write.contentDigest)
        let respelled = Mutation(path: path, kind: .set(["x": 1.5, "n": 1, "tags": ["a", "b"], "name": "Ada"]), transforms: [.init("seen", .serverTimestamp)])
        #expect(respelled.contentDigest == write.contentDigest)
        let others: [Mutation] = [
            .set(path, ["name": "Ada", "tags": ["b", "a"], "n": 1, "x": 1.5], transforms: [.init("seen", .serverTimestamp)]),
            .set(path, ["name": "Ada", "tags": ["a", "b"], "n": 1.0, "x": 1.5], transforms: [.init("seen", .serverTimestamp)]),
            .set(path, ["name": "Ada", "tags": ["a", "b"], "n": 1, "x": 1.5]),
            .merge(path, ["name": "Ada", "tags": ["a", "b"], "n": 1, "x": 1.5], transforms: [.init("seen", .serverTimestamp)]),
            write.requiring(.exists(true)),
            .set(try DocumentPath("users/bob"), ["name": "Ada", "tags": ["a", "b"], "n": 1, "x": 1.5], transforms: [.init("seen", .serverTimestamp)]),
            .update(path, fields: ["name": "Ada"]),
            .update(path, fields: ["name": "Bob"]),
            .delete(path),
        ]
        let digests = Set(([write] + others).map(\.contentDigest))
        #expect(digests.count == others.count + 1)
    }

    @Test("data shaped like a transform ({\"$…\": x} as a field's value) is refused at once, not misread by the server")
    func sentinelShapedData() throws {
        let path = try DocumentPath("items/a")
        for mutation in [
            Mutation.set(path, ["id": ["$oid": "5f1"]]),
            Mutation.merge(path, ["a": ["b": ["$increment": 1]]]),
            Mutation.update(path, fields: ["a": ["b": ["$delete": true]]]),
            Mutation.update(path, fields: ["a": ["$x": 1]]),
        ] {
            #expect(throws: TandemError.self) { try mutation.validate() }
        }
        // A top-level key, an object of several keys, or an array element are data on the wire too.
        for mutation in [
            Mutation.set(path, ["$top": 1, "a": ["$b": 1, "c": 2], "list": [["$x": 1]]]),
            Mutation.update(path, fields: ["list": [["$x": 1]]]),
        ] {
            try mutation.validate()
        }
        let error = #expect(throws: TandemError.self) { try Mutation.set(path, ["id": ["$oid": "5f1"]]).validate() }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("'id'") == true)
    }
}
