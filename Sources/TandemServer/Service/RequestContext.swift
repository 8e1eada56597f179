/// Who is asking, for every request that reaches ``SyncService``: the place access rules will read
/// from. Internal until those rules exist: nothing outside the server builds one yet.
struct RequestContext: Sendable, Hashable {
    /// The caller's verified identity.
    enum Identity: Sendable, Hashable {
        /// No credentials: everyone, on a server that runs open.
        case anonymous
    }

    var identity: Identity
    /// The client id a WebSocket connection said `hello` with: the owner of the writer ids it
    /// writes under (a writer id belongs to the client that first wrote under it). Nil over HTTP,
    /// where each request stands alone and may write only under writer ids nobody owns.
    var clientID: String?

    init(identity: Identity = .anonymous, clientID: String? = nil) {
        self.identity = identity
        self.clientID = clientID
    }
}
