/// Where a message goes, read without the rest of it: its type, its request id and the listeners
/// it is for. For a layer between client and server that only routes or counts messages (the test
/// mocks' fault injection), so a message is not parsed in full twice.
package struct WireEnvelope: Sendable, Equatable {
    package var type: String?
    package var id: Int?
    /// A batch's listener (a listen's target, an object, is not read).
    package var target: Int?
    /// A shared batch's listeners.
    package var targets: [Int] = []

    /// The envelope of a message's text; nil when it is not a JSON object.
    package init?(_ text: String) {
        var text = text
        let read: WireEnvelope? = text.withUTF8 { bytes in
            var parser = JSONParser(bytes: bytes)
            var envelope = WireEnvelope()
            do {
                try parser.readObject { (parser, key) throws(TandemError) in
                    switch key {
                    case "type": envelope.type = try parser.readString()
                    case "id": envelope.id = try parser.readInt()
                    case "target":
                        parser.skipWhitespace()
                        if parser.index < parser.bytes.count, parser.bytes[parser.index] != UInt8(ascii: "{") {
                            envelope.target = try parser.readInt()
                        } else {
                            try parser.skipValue()
                        }
                    case "targets":
                        try parser.readArray { (parser) throws(TandemError) in envelope.targets.append(try parser.readInt()) }
                    default:
                        try parser.skipValue()
                    }
                }
            } catch {
                return nil
            }
            return envelope
        }
        guard let read else { return nil }
        self = read
    }

    private init() {}
}
