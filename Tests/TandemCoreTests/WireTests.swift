import Foundation
import Testing
import TandemCore

@Suite("Wire format")
struct WireTests {
    let path = try! DocumentPath("users/ada")

    @Test("every client message survives a trip through JSON text")
    func clientMessagesRoundTrip() throws {
        let query = Query().whereField("age", isGreaterThanOrEqualTo: 18).order(by: "score", descending: true).limit(to: 10).start(after: 3)
        let mutation = Mutation.update(path, fields: ["name": "Ada", "address.city": "London"], transforms: [.init("visits", .increment(1))])
            .requiring(.version(7)).identified(by: MutationID(clientID: "c1", sequence: 42))
        let messages: [ClientMessage] = [
            .hello(clientID: "c1", protocolVersion: 1, token: "t"),
            .listen(id: 3, target: .collection(try CollectionPath("users"), query), resumeFrom: 9),
            .listen(id: 4, target: .document(path), resumeFrom: nil),
            .listen(id: 5, target: .collectionGroup("reviews", Query()), resumeFrom: nil),
            .unlisten(id: 3),
            .write(id: 6, mutations: [mutation, .delete(path), .set(path, ["a": 1.0], transforms: [.init("t", .serverTimestamp)])]),
            .get(id: 7, path: path),
            .query(id: 8, target: .collection(try CollectionPath("users"), query)),
            .fetch(id: 9, target: .collection(try CollectionPath("users"), Query()), since: 40, limit: 100),
            .fetch(id: 10, target: .collection(try CollectionPath("users"), Query()), since: 40, limit: 100, fromStart: true),
            .heartbeat,
        ]
        for message in messages {
            let decoded = try ClientMessage(wire: try JSONText.parse(message.text))
            #expect(decoded == message)
            #expect(message.text == JSONText.encode(message.wireValue))  // the direct writer matches
        }
        // Writes of every shape the direct writer spells itself, and those it leaves to the value.
        let id = MutationID(clientID: "w\"1", sequence: 9)
        let writes: [Mutation] = [
            .set(path, ["b": ["c": [1, "x", nil]], "a": 2.5]),
            Mutation.set(path, [:]).requiring(.exists(false)).identified(by: id),
            Mutation.set(path, ["z": true]).requiring(.exists(true)),
            Mutation.delete(path).requiring(.version(3)).identified(by: id),
            .delete(path),
            Mutation.set(path, ["t": 1], transforms: [.init("n", .increment(2))]).identified(by: id),
            .merge(path, ["m": 1], fields: [FieldPath("m")]),
            mutation,
        ]
        // A set that carries its data's text is written with that text as it is; equality ignores it.
        var kept = Mutation.set(path, ["a": 2, "b": 1]).identified(by: id)
        kept.encodedData = #"{"b":1,"a":2}"#
        #expect(ClientMessage.write(id: 4, mutations: [kept]).text.contains(#""data":{"b":1,"a":2},"id""#))
        #expect(kept == Mutation.set(path, ["a": 2, "b": 1]).identified(by: id))
        for message in [ClientMessage.write(id: 1, mutations: writes), .writeEach(id: 2, mutations: writes), .writeEach(id: 3, mutations: []),
                        .write(id: 4, mutations: writes, brief: true), .writeEach(id: 5, mutations: writes, brief: true)] {
            #expect(message.text == JSONText.encode(message.wireValue))
            #expect(try ClientMessage(wire: try JSONText.parse(message.text)) == message)
        }
    }

    @Test("every server message survives a trip through JSON text")
    func serverMessagesRoundTrip() throws {
        let document = Document(path: path, data: ["n": 1, "x": 1.5], version: 4, createTime: Date(timeIntervalSince1970: 1_700_000_000.123), updateTime: Date(timeIntervalSince1970: 1_700_000_100.5))
        let messages: [ServerMessage] = [
            .welcome(protocolVersion: 1, serverVersion: "0.1.0", heartbeatSeconds: 10),
            .welcome(protocolVersion: 2, serverVersion: "0.1.0", heartbeatSeconds: 10, user: "ada"),
            .ack(id: 2, acknowledgements: [WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 1), version: 4, document: document), WriteAcknowledgement(id: nil, version: 4, document: nil)]),
            .ack(id: 6, acknowledgements: [
                WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 1), status: .replayed, version: 3, document: document),
                .refused(MutationID(clientID: "c", sequence: 2), TandemError(.failedPrecondition, "users/ada \"must\" exist"), at: 4),
                WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 4), status: .refused, version: 4, document: document,
                                     error: TandemError(.failedPrecondition, "stale: the document as it is now comes with it")),
                WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 3), status: .unknown, version: 4),
            ]),
            .batch(target: 3, batch: RemoteChangeBatch(isSnapshot: true, changes: [.upsert(document)], version: 4), reset: true, more: true),
            .batch(target: 3, batch: RemoteChangeBatch(isSnapshot: false, changes: [RemoteChange(path: path, document: nil, version: 5, mutationID: MutationID(clientID: "c", sequence: 2))], version: 5), reset: false, more: false),
            .sharedBatch(targets: [3, 8], batch: RemoteChangeBatch(isSnapshot: false, changes: [.upsert(document)], version: 4)),
            .documents(id: 4, documents: [document], version: 9),
            .page(id: 7, ChangePage(changes: [.upsert(document), RemoteChange(path: path, document: nil, version: 6, mutationID: nil)], version: 6, hasMore: true)),
            .page(id: 8, ChangePage(changes: [], version: 6, hasMore: false)),
            .error(id: 5, TandemError(.failedPrecondition, "no")),
            .error(id: nil, TandemError(.invalidArgument, "bad")),
            .heartbeat,
        ]
        for message in messages {
            #expect(try ServerMessage(wire: try JSONText.parse(message.text)) == message)
            #expect(try ServerMessage.parse(message.text) == message)  // the batch reader agrees
            #expect(message.text == JSONText.encode(message.wireValue))  // the direct writer matches
        }
        // An acknowledgement that carries its data's text is written with that text as it is, and
        // the reader keeps the text it read; equality ignores it.
        let kept = WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 1), version: 4, document: document, encodedData: #"{"x":1.5,"n":1}"#)
        let text = ServerMessage.ack(id: 2, acknowledgements: [kept]).text
        #expect(text.contains(#""data":{"x":1.5,"n":1}"#))
        guard case .ack(2, let read) = try ServerMessage.parse(text) else {
            Issue.record("expected an ack")
            return
        }
        #expect(read == [kept] && read[0].encodedData == #"{"x":1.5,"n":1}"#)
        #expect(WriteAcknowledgement(id: nil, version: 4, document: nil, encodedData: "{}").encodedData == nil)
        // A server of protocol 1 sends no status: read as applied, by both readers.
        let old = #"{"id":3,"results":[{"document":null,"mutationId":{"client":"c","sequence":1},"version":7}],"type":"ack"}"#
        let expected = ServerMessage.ack(id: 3, acknowledgements: [WriteAcknowledgement(id: MutationID(clientID: "c", sequence: 1), version: 7, document: nil)])
        #expect(try ServerMessage.parse(old) == expected && ServerMessage(wire: try JSONText.parse(old)) == expected)
        #expect(throws: TandemError.self) { try ServerMessage.parse(old.replacingOccurrences(of: #""version":7"#, with: #""status":"maybe","version":7"#)) }
    }

    @Test("the batch reader takes keys in any order and leaves malformed batches to the generic reader's errors")
    func batchReader() throws {
        let reordered = #"{"changes":[{"version":5,"path":"users/ada","document":{"version":5,"updateTime":"2026-11-22T04:33:00.123Z","path":"users/ada","data":{"n":-12,"big":1.2345678901234567e19,"x":2.5e3},"createTime":"2026-11-22T04:33:00Z"}}],"version":5,"type":"snapshot","target":2,"more":true}"#
        guard case .batch(2, let batch, false, true) = try ServerMessage.parse(reordered) else {
            Issue.record("expected a batch")
            return
        }
        #expect(try ServerMessage(wire: try JSONText.parse(reordered)) == .batch(target: 2, batch: batch, reset: false, more: true))
        #expect(batch.changes[0].document?.data == ["n": -12, "big": .double(1.2345678901234567e19), "x": 2500.0])
        // The data's text is kept as it came, for a cache to store; equality does not look at it.
        #expect(batch.changes[0].encodedData == #"{"n":-12,"big":1.2345678901234567e19,"x":2.5e3}"#)
        #expect(try JSONText.parse(batch.changes[0].encodedData!) == .object(batch.changes[0].document!.data))
        var other = batch.changes[0]
        other.encodedData = nil
        #expect(other == batch.changes[0] && other.hashValue == batch.changes[0].hashValue)
        // A change's path written with an escape still names its document's path.
        let escaped = #"{"changes":[{"document":{"createTime":"2026-11-22T04:33:00Z","data":{},"path":"users/ada","updateTime":"2026-11-22T04:33:00Z","version":2},"path":"users\/ada","version":2}],"target":1,"type":"changes","version":2}"#
        guard case .batch(1, let escapedBatch, false, false) = try ServerMessage.parse(escaped) else {
            Issue.record("expected a batch")
            return
        }
        #expect(escapedBatch.changes[0].path == escapedBatch.changes[0].document?.path)
        #expect(try ServerMessage(wire: try JSONText.parse(escaped)) == .batch(target: 1, batch: escapedBatch, reset: false, more: false))
        let malformed = [
            (#"{"changes":[{"document":null,"path":"users","version":1}],"target":1,"type":"changes","version":1}"#, "names a collection"),
            (#"{"changes":[{"document":null,"path":"users/ada"}],"target":1,"type":"changes","version":1}"#, "missing the field 'version'"),
            (#"{"changes":[],"more":"yes","target":1,"type":"changes","version":1}"#, "'more'"),
            (#"{"changes":[],"target":1,"type":"changes","version":1"#, "Malformed JSON"),
            (#"{"changes":[{"document":{"createTime":"2026-11-22T04:33:00Z","data":{"n":123456789012345678901234567890},"path":"a/b","updateTime":"2026-11-22T04:33:00Z","version":1},"path":"a/b","version":1}],"target":1,"type":"changes","version":1}"#, "does not fit in 64 bits"),
        ]
        for (text, fragment) in malformed {
            #expect(throws: TandemError.self) { try ServerMessage.parse(text) }
            do {
                _ = try ServerMessage.parse(text)
            } catch {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains(fragment), "\(error.message)")
            }
        }
    }

    @Test("a timestamp written from milliseconds reads back, and integers of every size parse exactly")
    func timestampsAndIntegers() throws {
        for millis: Int64 in [0, 1, 999, 1_700_000_000_123, 4_102_444_799_999, -1, -86_400_001] {
            var bytes: [UInt8] = []
            WireTimestamp.write(milliseconds: millis, to: &bytes)
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(text == WireTimestamp.format(WireTimestamp.date(milliseconds: millis)))
            #expect(WireTimestamp.parse(text).map(WireTimestamp.milliseconds) == millis)
        }
        for int in [0, -0, 7, -7, 123_456_789_012_345_678, -123_456_789_012_345_678, Int.max, Int.min] {
            #expect(try JSONText.parse(String(int)) == .int(int))
            #expect(JSONText.encode(.int(int)) == String(int))
        }
        #expect(try JSONText.parse("-0") == .int(0))
    }

    @Test("transforms travel as $-sentinels inside set data and update fields")
    func sentinels() throws {
        let text = #"{"op":"set","path":"users/ada","merge":true,"data":{"name":"Ada","stats":{"visits":{"$increment":2},"seen":{"$serverTimestamp":true}},"old":{"$delete":true},"tags":{"$arrayUnion":["a"]},"gone":{"$arrayRemove":[1]}}}"#
        let mutation = try Mutation(wire: try JSONText.parse(text))
        guard case .merge(let data, nil) = mutation.kind else { Issue.record("expected a merge"); return }
        #expect(data == ["name": "Ada", "stats": [:]])
        let transforms = Dictionary(uniqueKeysWithValues: mutation.transforms.map { ($0.field.description, $0.transform) })
        #expect(transforms["stats.visits"] == .increment(2))
        #expect(transforms["stats.seen"] == .serverTimestamp)
        #expect(transforms["old"] == .delete)
        #expect(transforms["tags"] == .arrayUnion(["a"]))
        #expect(transforms["gone"] == .arrayRemove([1]))
        #expect(try Mutation(wire: try JSONText.parse(mutation.wireValue.description)) == mutation)
    }

    @Test("malformed wire input is invalid-argument and says what is wrong", arguments: [
        (#"{"type":"nope"}"#, "Unknown message type"),
        (#"{"type":"listen","id":1}"#, "missing the field 'target'"),
        (#"{"type":"listen","id":"1","target":{"document":"a/b"}}"#, "must be an integer"),
        (#"{"type":"get","id":1,"path":"users"}"#, "names a collection"),
        (#"{"type":"write","id":1,"mutations":[{"op":"set","path":"a/b","data":{"n":{"$incr":1}}}]}"#, "Unknown transform"),
        (#"{"type":"write","id":1,"mutations":[{"op":"update","path":"a/b","fields":{"n":{"$increment":"x"}}}]}"#, "needs a number"),
        (#"{"type":"write","id":1,"mutations":[{"op":"upsert","path":"a/b"}]}"#, "Unknown write op"),
        (#"{"type":"query","id":1,"target":{"group":"g","query":[{"where":"a","op":"==","value":1,"startAt":[1]}]}}"#, "names where and startAt"),
        (#"{"type":"write","id":1,"mutations":[{"op":"set","path":"a/b","data":{"n":1},"mergeFields":["n"]}]}"#, "applies with \"merge\": true"),
        (#"{"type":"query","id":1,"target":{"collection":"c","query":[{"where":"a","op":"~","value":1}]}}"#, "Unknown filter operator"),
        (#"{"type":"listen","id":1,"target":{"collection":"c"},"resumeFrom":-3}"#, "negative"),
        (#"[1,2]"#, "JSON object"),
    ])
    func malformed(text: String, fragment: String) throws {
        do {
            _ = try ClientMessage(wire: try JSONText.parse(text))
            Issue.record("expected an error for \(text)")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains(fragment), "\(error.message)")
        }
    }

    @Test("the id of a message that does not parse is still found, to answer it")
    func requestIDOfBadMessage() throws {
        #expect(ClientMessage.requestID(in: try JSONText.parse(#"{"type":"write","id":12,"mutations":7}"#)) == 12)
    }

    @Test("timestamps are ISO 8601 UTC with milliseconds, both ways, before and after 1970")
    func timestamps() throws {
        let cases: [(Int64, String)] = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (-86_400_001, "1969-12-30T23:59:59.999Z"),
            (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
        ]
        for (millis, expected) in cases {
            let date = Date(timeIntervalSince1970: Double(millis) / 1000)
            #expect(ServerTime(date).iso8601 == expected)
            let document = try Document(wire: Document(path: path, data: [:], createTime: date).wireValue)
            #expect(document.createTime == date)
        }
        #expect(try Document(wire: ["path": "a/b", "version": 1, "createTime": "2026-11-22T04:33:00Z", "updateTime": "2026-11-22T04:33:00.5Z", "data": [:]]).updateTime.timeIntervalSince1970 == 1_795_321_980.5)
        #expect(throws: TandemError.self) { try Document(wire: ["path": "a/b", "version": 1, "createTime": "yesterday", "updateTime": "x", "data": [:]]) }
        // Digits past the milliseconds are dropped, however many; anything else there is refused.
        #expect(WireTimestamp.parse("1970-01-01T00:00:01.12345Z") == Date(timeIntervalSince1970: 1.123))
        #expect(WireTimestamp.parse("1970-01-01T00:00:01.1234567890123456789012345678901234567890Z") == Date(timeIntervalSince1970: 1.123))
        #expect(WireTimestamp.parse("1970-01-01T00:00:01.12Z") == Date(timeIntervalSince1970: 1.12))
        #expect(WireTimestamp.parse("1970-01-01T00:00:01.1234x6Z") == nil)
        #expect(WireTimestamp.parse("1970-01-01T00:00:01.Z") == nil)
    }

    @Test("strings are escaped exactly and survive a round trip")
    func stringEscapes() throws {
        let text = "q\"b\\n\nr\rt\tc\u{01}\u{1F}é😀/end"
        #expect(JSONText.encode(.string(text)) == #""q\"b\\n\nr\rt\tc\u0001\u001fé😀/end""#)
        #expect(try JSONText.parse(JSONText.encode(["k\"": .string(text)])) == ["k\"": .string(text)])
        #expect(JSONText.encode(["b": 1.5, "a": [true, .null, -3]]) == #"{"a":[true,null,-3],"b":1.5}"#)
    }
}

@Suite("Wire envelopes")
struct WireEnvelopeTests {
    @Test("an envelope reads a message's type, id and targets and passes over the rest, whatever it holds")
    func envelopes() throws {
        let path = try DocumentPath("items/a")
        let write = ClientMessage.write(id: 4, mutations: [.set(path, ["note": "a \"quoted\" \\ text", "list": [1, [2, ["x": nil]]], "n": -1.5e3])])
        #expect(read(write.text) == envelope(type: "write", id: 4))
        let listen = ClientMessage.listen(id: 9, target: .document(path), resumeFrom: 3)
        #expect(read(listen.text) == envelope(type: "listen", id: 9))
        let document = Document(path: path, data: ["k": "v"], version: 2)
        let batch = ServerMessage.batch(target: 9, batch: RemoteChangeBatch(isSnapshot: true, changes: [.upsert(document)], version: 2), reset: false, more: false)
        #expect(read(JSONText.encode(batch.wireValue)) == envelope(type: "snapshot", target: 9))
        let shared = ServerMessage.sharedBatch(targets: [1, 5], batch: RemoteChangeBatch(isSnapshot: false, changes: [.upsert(document)], version: 3))
        #expect(read(JSONText.encode(shared.wireValue)) == envelope(type: "changes", targets: [1, 5]))
        let error = ServerMessage.error(id: 7, TandemError(.unavailable, "down"))
        #expect(read(JSONText.encode(error.wireValue)) == envelope(type: "error", id: 7))
        for malformed in ["", "[1]", "{\"type\": \"write\"", "{\"a\": \"open", "{\"type\": 3}", "{\"id\": \"x\"}"] {
            #expect(WireEnvelope(malformed) == nil, "\(malformed)")
        }
    }

    private func read(_ text: String) -> Fields? {
        WireEnvelope(text).map { Fields(type: $0.type, id: $0.id, target: $0.target, targets: $0.targets) }
    }

    /// What an envelope read, field by field.
    private func envelope(type: String, id: Int? = nil, target: Int? = nil, targets: [Int] = []) -> Fields {
        Fields(type: type, id: id, target: target, targets: targets)
    }

    private struct Fields: Equatable {
        var type: String?
        var id: Int?
        var target: Int?
        var targets: [Int]
    }
}

@Suite("Request ids from a prefix")
struct RequestIDPrefixTests {
    @Test("the id of a message is read from its first bytes alone, at the top level only, whatever follows")
    func requestIDFromPrefix() {
        func id(_ text: String, limit: Int = 512) -> Int? { ClientMessage.requestID(prefix: Array(text.utf8), limit: limit) }
        #expect(id(#"{"atomic":false,"id":7,"mutations":[{"id":{"client":"c","sequence":1}}"#) == 7)
        #expect(id(#"{ "id" : 42 , "type": "write""#) == 42)
        #expect(id(#"{"type":"write","mutations":[{"id":3}],"id":-5}"#) == -5)
        #expect(id(#"{"mutations":[{"id":3}]"#) == nil, "a nested id is not the message's")
        #expect(id(#"{"type":"id","text":"\"id\":9","x":1}"#) == nil, "an id inside a string is not one")
        #expect(id(#"{"id":"seven"}"#) == nil)
        #expect(id(#"{"padding":"\#(String(repeating: "z", count: 600))","id":1}"#) == nil, "past the limit nothing is read")
        #expect(id("not json at all") == nil)
        #expect(id(#"{"id":12"#) == nil, "digits cut off at the end of the prefix are not trusted")
    }
}
