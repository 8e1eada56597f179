/// The identity of one client write: the client's id and its per-client sequence number.
/// The server applies a mutation at most once, answering a replay with the original result.
public struct MutationID: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The writer id (`client` on the wire): it belongs to whoever first wrote under it.
    public var clientID: String
    /// The write's number among its writer's writes: it increases in the order writes are sent, and
    /// is never given to two different writes.
    public var sequence: UInt64

    /// An id from a writer id and a sequence number.
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
