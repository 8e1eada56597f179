/// Who is asking: a verified user or no one (anonymous), and the device the request comes from.
///
/// Made once per WebSocket connection, at `hello` (the device is the client id it says), and once
/// per HTTP request (no device: each request stands alone). Everything that depends on who asks is
/// derived from it, never kept apart:
/// - what access control reads (``identity``);
/// - who owns the writer ids a write uses (``writerOwner``);
/// - whom a connection, its writes and its HTTP reads count against in ``Admission`` (``caller``).
///
/// A client id grants nothing by itself: the same id said by two users is two principals, and
/// neither can write under the other's writer ids.
struct Principal: Sendable, Hashable {
    /// The caller's verified identity.
    enum Identity: Sendable, Hashable {
        /// No credentials: everyone, on a server that runs open; refused whatever needs a user on
        /// one that does not.
        case anonymous
        /// A user proven by a bearer token.
        case user(AuthenticatedUser)
    }

    var identity: Identity
    /// The client id a WebSocket connection said `hello` with; nil over HTTP.
    var device: String?
    /// The address the connection or request came from; nil in process.
    var address: String?

    init(identity: Identity = .anonymous, device: String? = nil, address: String? = nil) {
        self.identity = identity
        self.device = device
        self.address = address
    }

    /// Who owns the writer ids this principal writes under: a writer id belongs to the owner of
    /// the first connection that wrote under it. A signed-in user's writer ids are the user's, on
    /// any of their devices (a device that lost its client id keeps writing its queued writes); an
    /// anonymous caller's belong to its device. Nil over HTTP as anonymous: such a request may
    /// write only under writer ids nobody owns, and claims none.
    ///
    /// The two namespaces never meet, whatever a client id says: a user's owner starts with `u`,
    /// an anonymous device's with `a:` (an anonymous hello with the client id `u3:ada` owns
    /// `a:u3:ada`, not Ada's writer ids). Each store migrates the owners it kept before the prefix:
    /// one that is not a user's owner (`u<n>:` and `n` bytes) gains it.
    var writerOwner: String? {
        switch identity {
        case .user(let user): return Self.userOwner(user.uid)
        case .anonymous: return device.map(Self.anonymousOwner)
        }
    }

    /// The owner of a signed-in user's writer ids: the user id, its length first.
    static func userOwner(_ uid: String) -> String { "u\(uid.utf8.count):\(uid)" }
    /// The owner of an anonymous device's writer ids.
    static func anonymousOwner(_ device: String) -> String { "a:" + device }

    /// Whether a stored owner reads as a user's: `u`, the uid's byte count (no leading zero), `:`,
    /// then exactly that many bytes.
    static func readsAsUserOwner(_ owner: String) -> Bool {
        let bytes = Array(owner.utf8)
        guard bytes.first == UInt8(ascii: "u"), let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return false }
        let digits = bytes[1..<colon]
        guard (1...9).contains(digits.count), digits.first != UInt8(ascii: "0"),
              digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              let count = Int(String(decoding: digits, as: UTF8.self)) else { return false }
        return bytes.count - colon - 1 == count
    }

    /// Whether `owner`, kept by a store, is the anonymous owner `claimant` as it was written before
    /// anonymous owners were prefixed: a node not yet upgraded (several nodes on one database are
    /// upgraded one at a time) claims under the bare client id. One that reads as a user's owner
    /// never is: that is the id an attacker would say.
    static func isLegacyAnonymousOwner(_ owner: String, of claimant: String) -> Bool {
        claimant.hasPrefix("a:") && claimant.utf8.dropFirst(2).elementsEqual(owner.utf8) && !readsAsUserOwner(owner)
    }

    /// Whom this principal's connections, writes and HTTP reads count against: its user, or an
    /// anonymous caller's address (an IPv6 address by its /64, see
    /// ``Admission/Caller/anonymous(from:)``). Nil for an anonymous caller with no address (in
    /// process), which only the per-connection limits bound.
    var caller: Admission.Caller? {
        if let user = identity.user { return .user(user.uid) }
        if let address { return .anonymous(from: address) }
        return nil
    }
}
