/// Who is asking, for every request that reaches ``SyncService``: the place access rules will read
/// from.
public struct RequestContext: Sendable, Hashable {
    /// The caller's verified identity.
    public enum Identity: Sendable, Hashable {
        /// No credentials: everyone, on a server that runs open.
        case anonymous
    }

    public var identity: Identity
    /// The client id a WebSocket connection said `hello` with: every mutation id it sends must be
    /// this client's. Nil over HTTP, where each request stands alone.
    public var clientID: String?

    public init(identity: Identity = .anonymous, clientID: String? = nil) {
        self.identity = identity
        self.clientID = clientID
    }
}
