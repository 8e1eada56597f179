/// Who is asking, for every request that reaches ``SyncService``: what access control reads.
struct RequestContext: Sendable, Hashable {
    /// The caller's verified identity.
    enum Identity: Sendable, Hashable {
        /// No credentials: everyone, on a server that runs open; refused whatever needs a user on
        /// one that does not.
        case anonymous
        /// A user proven by a bearer token.
        case user(AuthenticatedUser)
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

    /// The client id the store binds writer ids to. A signed-in user's client ids are their own:
    /// the same id said by another user is another client, so it can neither write, nor replay,
    /// under the writer ids of the first.
    var storeClientID: String? {
        guard let clientID else { return nil }
        switch identity {
        case .anonymous: return clientID
        case .user(let user): return "u\(user.uid.utf8.count):\(user.uid)/\(clientID)"
        }
    }
}
