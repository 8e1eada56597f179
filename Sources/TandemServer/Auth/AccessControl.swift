import Foundation
import TandemCore

/// Who may do what on a server started with an auth secret. Requests carry bearer tokens
/// (``BearerTokens``); a request without one is anonymous. The policy today is the default one:
/// each user reads and writes the documents under `users/{uid}` (that document and everything
/// below it) and nothing else; a token whose `admin` claim is `true` may also read the whole
/// change feed. A refusal of an anonymous caller is `unauthenticated` (sign in); of a signed-in
/// one, `permission-denied`.
///
/// ```swift
/// var configuration = SyncServerConfiguration()
/// configuration.access = AccessControl(tokens: try await BearerTokens(secret: secret))
/// ```
public struct AccessControl: Sendable {
    public let tokens: BearerTokens
    /// The wall clock that tokens' `exp` and `nbf` are checked against.
    public let now: @Sendable () -> Date

    public init(tokens: BearerTokens, now: @escaping @Sendable () -> Date = { Date() }) {
        self.tokens = tokens
        self.now = now
    }

    /// The identity a bearer token proves; anonymous without one. A token that is malformed,
    /// badly signed, expired or not yet valid is refused with `unauthenticated`.
    func authenticate(_ token: String?) throws(TandemError) -> RequestContext.Identity {
        guard let token else { return .anonymous }
        return .user(try tokens.verify(token, now: now()))
    }

    /// The identity of an HTTP `Authorization` header's value.
    func authenticate(authorization: String?) throws(TandemError) -> RequestContext.Identity {
        guard let authorization else { return .anonymous }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw TandemError(.unauthenticated, "The Authorization header must be `Bearer <token>`.")
        }
        return try authenticate(String(parts[1]).trimmingCharacters(in: .whitespaces))
    }

    // MARK: The default policy

    /// Reads of one document, or of every document a target could return.
    func checkRead(_ target: ListenTarget, by identity: RequestContext.Identity) throws(TandemError) {
        let allowed: Bool
        switch target {
        case .document(let path): allowed = owns(path.segments, identity)
        case .collection(let path, _): allowed = owns(path.segments, identity)
        case .collectionGroup: allowed = false
        }
        if !allowed { throw refusal("read \(target)", identity) }
    }

    /// A request's writes: all of them are allowed, or the request is refused whole.
    func checkWrite(_ mutations: [Mutation], by identity: RequestContext.Identity) throws(TandemError) {
        for mutation in mutations where !owns(mutation.path.segments, identity) {
            throw refusal("write \(mutation.path)", identity)
        }
    }

    /// The change feed of every document: operators only.
    func checkWholeChangeFeed(by identity: RequestContext.Identity) throws(TandemError) {
        guard case .user(let user) = identity, user.claims["admin"] == .bool(true) else {
            throw refusal("read the whole change feed (a token with \"admin\": true may)", identity)
        }
    }

    /// Whether `segments` are `users/{uid}` or below it, for the caller's own uid.
    private func owns(_ segments: [String], _ identity: RequestContext.Identity) -> Bool {
        guard case .user(let user) = identity else { return false }
        return segments.count >= 2 && segments[0] == "users" && segments[1] == user.uid
    }

    private func refusal(_ what: String, _ identity: RequestContext.Identity) -> TandemError {
        switch identity {
        case .anonymous:
            return TandemError(.unauthenticated, "Sign in to \(what): this server requires a bearer token (Authorization: Bearer … over HTTP, `token` in the WebSocket hello).")
        case .user(let user):
            return TandemError(.permissionDenied, "\(user.uid) may not \(what): each user reaches users/{their uid} and below only.")
        }
    }
}
