/// The identity of one client write: the client's id and its per-client sequence number.
/// The server applies a mutation at most once, answering a replay with the original result.
public struct MutationID: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var clientID: String
    public var sequence: UInt64

    public init(clientID: String, sequence: UInt64) {
        self.clientID = clientID
        self.sequence = sequence
    }

    public var description: String { "\(clientID)#\(sequence)" }

    /// Orders by client, then sequence.
    public static func < (lhs: MutationID, rhs: MutationID) -> Bool {
        (lhs.clientID, lhs.sequence) < (rhs.clientID, rhs.sequence)
    }
}
