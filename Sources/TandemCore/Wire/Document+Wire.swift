import Foundation

extension Document {
    /// The document as the server sends it: `{"path", "version", "createTime", "updateTime", "data"}`.
    public var wireValue: JSONValue {
        .object([
            "path": .string(path.description),
            "version": .int(Int(clamping: version.rawValue)),
            "createTime": .string(WireTimestamp.format(createTime)),
            "updateTime": .string(WireTimestamp.format(updateTime)),
            "data": .object(data),
        ])
    }

    /// Reads a document in its wire form; a malformed one throws `invalid-argument`.
    public init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "a document")
        let path = try object.documentPath("path")
        func time(_ key: String) throws(TandemError) -> Date {
            let text = try object.string(key)
            guard let date = WireTimestamp.parse(text) else {
                throw TandemError.invalidArgument("The '\(key)' of \(path) is not an ISO 8601 UTC time such as 2026-11-22T04:33:00.123Z: '\(text)'.")
            }
            return date
        }
        self.init(
            path: path,
            data: try object.object("data"),
            version: try object.version("version"),
            createTime: try time("createTime"),
            updateTime: try time("updateTime")
        )
    }
}

extension MutationID {
    /// `{"client": "…", "sequence": n}` on the wire.
    public var wireValue: JSONValue {
        .object(["client": .string(clientID), "sequence": .int(Int(clamping: sequence))])
    }

    /// Reads a mutation id in its wire form; a malformed one (an empty client, a negative sequence)
    /// throws `invalid-argument`.
    public init(wire value: JSONValue) throws(TandemError) {
        let object = try WireObject(value, context: "a mutation id")
        let client = try object.string("client")
        guard !client.isEmpty else { throw TandemError.invalidArgument("A mutation id needs a non-empty client id.") }
        let sequence = try object.int("sequence")
        guard sequence >= 0 else { throw TandemError.invalidArgument("A mutation id's sequence must not be negative (\(sequence)).") }
        self.init(clientID: client, sequence: UInt64(sequence))
    }
}
