import Foundation
import TandemCore

/// Who may do what on a server: bearer tokens (``BearerTokens``) say who a caller is, and
/// ``AccessRules`` what each caller may read and write. A request without a token is anonymous.
/// Without a rules file the rules are ``AccessRules/ownDocuments``: each user reaches
/// `users/{uid}` and below. The whole change feed (`/v1/changes` without a target) is for a token
/// whose `admin` claim is `true`. A refusal of an anonymous caller is `unauthenticated` (sign in);
/// of a signed-in one, `permission-denied`.
///
/// ```swift
/// var configuration = SyncServerConfiguration()
/// configuration.access = AccessControl(
///     tokens: try await BearerTokens(secret: secret),
///     rules: try AccessRules(contentsOfFile: "rules.yaml"))
/// ```
public struct AccessControl: Sendable {
    /// Nil: no token is verified, every caller is anonymous, and the rules decide what anonymous
    /// callers may do.
    public let tokens: BearerTokens?
    /// What each caller may read and write, checked on every request.
    public let rules: AccessRules
    /// The wall clock that tokens' `exp` and `nbf` are checked against.
    public let now: @Sendable () -> Date

    /// Access control that verifies callers with `tokens` and decides what they may do by `rules`.
    ///
    /// - Parameters:
    ///   - tokens: verifies bearer tokens; nil verifies none, and a request that carries one is
    ///     refused with `unauthenticated`.
    ///   - rules: what each caller may read and write. Default `AccessRules.ownDocuments`.
    ///   - now: the wall clock tokens' `exp` and `nbf` are checked against; tests pass a fixed one.
    public init(tokens: BearerTokens?, rules: AccessRules = .ownDocuments, now: @escaping @Sendable () -> Date = { Date() }) {
        self.tokens = tokens
        self.rules = rules
        self.now = now
    }

    // MARK: Who

    /// The identity a bearer token proves; anonymous without one. A token that is malformed,
    /// badly signed, expired or not yet valid is refused with `unauthenticated`.
    func authenticate(_ token: String?) throws(TandemError) -> Principal.Identity {
        guard let token else { return .anonymous }
        guard let tokens else {
            throw TandemError(.unauthenticated, "This server was started without an auth secret or a key set, so it verifies no tokens; connect without one.")
        }
        return .user(try tokens.verify(token, now: now()))
    }

    /// The identity of an HTTP `Authorization` header's value.
    func authenticate(authorization: String?) throws(TandemError) -> Principal.Identity {
        guard let authorization else { return .anonymous }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw TandemError(.unauthenticated, "The Authorization header must be `Bearer <token>`.")
        }
        return try authenticate(String(parts[1]).trimmingCharacters(in: .whitespaces))
    }

    // MARK: Reads

    /// Decides a read of the document at `path` before it is read: nil when it is allowed
    /// whatever the document holds, a guard to check the document with when that depends on it.
    /// Throws the refusal when it is denied whatever the document holds.
    func readGuard(for path: DocumentPath, by identity: Principal.Identity) throws(TandemError) -> ReadGuard? {
        let decision = rules.decide(.get, at: path, auth: identity.user, resource: .unknown)
        switch decision.truth {
        case .yes:
            return nil
        case .maybe where rules.reads(.get, decision):
            return ReadGuard(access: self, path: path, identity: identity)
        default:
            throw refusal(.get, path.description, decision, identity)
        }
    }

    /// Checks what a listener or change feed of `target` may be sent: a document target as
    /// ``readGuard(for:by:)`` does (returning its guard, if it needs one), any other by
    /// ``checkList(_:by:)``.
    func checkRead(_ target: ListenTarget, by identity: Principal.Identity) throws(TandemError) -> ReadGuard? {
        if case .document(let path) = target { return try readGuard(for: path, by: identity) }
        try checkList(target, by: identity)
        return nil
    }

    /// Checks a read of one document, as it is (nil: there is none).
    func checkRead(_ document: Document?, at path: DocumentPath, by identity: Principal.Identity) throws(TandemError) {
        let decision = rules.decide(.get, at: path, auth: identity.user, resource: RuleDocument(document))
        if decision.truth != .yes { throw refusal(.get, path.description, decision, identity) }
    }

    /// Checks a query or listener over a collection or a collection group, by what its filters
    /// prove: refused whole if it could return a document the caller may not read.
    func checkList(_ target: ListenTarget, by identity: Principal.Identity) throws(TandemError) {
        let decision = rules.decideList(target, auth: identity.user)
        guard decision.truth != .yes else { return }
        let scope: String
        switch target {
        case .document(let path): scope = path.description
        case .collection(let path, _): scope = "the documents of \(path)"
        case .collectionGroup(let group, _): scope = "the documents of every collection named \(group)"
        }
        var error = refusal(.list, scope, decision, identity)
        if case .user = identity {
            error.message += " Rules are not filters: a query is allowed only when its own filters prove every document it could return may be read (say, `where owner == <your uid>` for a rule reading resource.data.owner)."
        }
        throw error
    }

    /// Whether a browsing caller is shown `target` (a whole collection or group) in a listing:
    /// when the rules let it list the target without filters, or when it is an operator (a token
    /// with `"admin": true`), who is shown every name though the rules still decide every read.
    func mayBrowse(_ target: ListenTarget, by identity: Principal.Identity) -> Bool {
        if case .user(let user) = identity, user.claims["admin"] == .bool(true) { return true }
        return rules.decideList(target, auth: identity.user).truth == .yes
    }

    /// The server's metrics (`GET /metrics`): operators only, as they count every user's traffic.
    func checkMetrics(by identity: Principal.Identity) throws(TandemError) {
        try requireAdmin(identity, toRead: "the metrics: they are", instead: nil)
    }

    /// The change feed of every document: operators only.
    func checkWholeChangeFeed(by identity: Principal.Identity) throws(TandemError) {
        try requireAdmin(identity, toRead: "the whole change feed: it is", instead: "Read the changes of one target instead.")
    }

    /// Refuses a caller whose token has no `"admin": true`: `unauthenticated` without one.
    private func requireAdmin(_ identity: Principal.Identity, toRead what: String, instead: String?) throws(TandemError) {
        guard case .user(let user) = identity, user.claims["admin"] == .bool(true) else {
            switch identity {
            case .anonymous where tokens == nil:
                // Rules without a token secret: every caller is anonymous, so none is an operator.
                throw TandemError(.unauthenticated, "No caller can read \(what) for a token with \"admin\": true, and this server takes no tokens (it has rules but no --auth-secret). Start it with --auth-secret too, and read them with such a token.")
            case .anonymous:
                throw TandemError(.unauthenticated, "Sign in to read \(what) for a token with \"admin\": true.")
            case .user(let user):
                throw TandemError(.permissionDenied, "\(user.uid) may not read \(what) for a token with \"admin\": true.\(instead.map { " \($0)" } ?? "")")
            }
        }
    }

    // MARK: Writes

    /// Decides each write of a commit, inside it, against the document before and after.
    ///
    /// A refused write reads the same whatever the document's hidden state: it names no operation
    /// (a create and an update would tell whether the document exists), and a write that failed on
    /// the document's state (a precondition, an update of a missing document, its size) is
    /// answered with that same refusal when the caller may not read the document.
    func writeAuthorizer(for identity: Principal.Identity) -> WriteAuthorizer {
        WriteAuthorizer { path, before, after in
            let operation: AccessRules.Operation = after == nil ? .delete : (before == nil ? .create : .update)
            let decision = rules.decide(operation, at: path, auth: identity.user, resource: RuleDocument(before), request: RuleDocument(after))
            return decision.truth == .yes ? nil : refusal("write", path.description, decision, identity)
        } conceal: { path, document in
            let decision = rules.decide(.get, at: path, auth: identity.user, resource: RuleDocument(document))
            return decision.truth == .yes ? nil : refusal("write", path.description, decision, identity)
        }
    }

    /// Whether the caller may read `document` as it is.
    func mayRead(_ document: Document, by identity: Principal.Identity) -> Bool {
        rules.decide(.get, at: document.path, auth: identity.user, resource: RuleDocument(document)).truth == .yes
    }

    // MARK: Refusals

    func refusal(_ operation: AccessRules.Operation, _ what: String, _ decision: AccessRules.Decision, _ identity: Principal.Identity) -> TandemError {
        refusal(operation.description, what, decision, identity)
    }

    /// The refusal of `verb` (an operation, or `write` for any write) on `what`.
    func refusal(_ operation: String, _ what: String, _ decision: AccessRules.Decision, _ identity: Principal.Identity) -> TandemError {
        let why = rules.describe(decision.rule)
        switch identity {
        case .anonymous:
            return TandemError(.unauthenticated, "Sign in to \(operation) \(what): \(why) for an anonymous caller. This server takes a bearer token (Authorization: Bearer … over HTTP, `token` in the WebSocket hello).")
        case .user(let user):
            return TandemError(.permissionDenied, "\(user.uid) may not \(operation) \(what): \(why).")
        }
    }
}

/// Checks each document a listener of one document is sent, when the rules that let it listen read
/// the document (`resource.data.owner == auth.uid`): the listener stops with the refusal once the
/// document no longer satisfies them.
final class ReadGuard: Sendable {
    let access: AccessControl
    let path: DocumentPath
    let identity: Principal.Identity

    init(access: AccessControl, path: DocumentPath, identity: Principal.Identity) {
        self.access = access
        self.path = path
        self.identity = identity
    }

    /// Nil when `document` (nil: deleted, or none) may be read, else the refusal.
    func check(_ document: Document?) -> TandemError? {
        do {
            try access.checkRead(document, at: path, by: identity)
            return nil
        } catch {
            return error
        }
    }

    /// The refusal of the first change whose document may not be read, if any.
    func refusal(of changes: [RemoteChange]) -> TandemError? {
        for change in changes {
            if let refusal = check(change.document) { return refusal }
        }
        return nil
    }
}

extension Principal.Identity {
    /// The signed-in user; nil when anonymous.
    var user: AuthenticatedUser? {
        if case .user(let user) = self { return user }
        return nil
    }
}

extension AccessRules {
    /// Whether the rule that made `decision` reads documents for `operation`, so the answer may
    /// change once the document is known.
    func reads(_ operation: Operation, _ decision: Decision) -> Bool {
        guard let rule = decision.rule else { return false }
        return rules[rule].conditions[operation.rawValue]?.readsDocuments ?? false
    }
}
