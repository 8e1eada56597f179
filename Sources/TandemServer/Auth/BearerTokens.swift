import Foundation
import JWTKit
import TandemCore

/// A caller proven by a bearer token: its user id (`sub`) and every claim, for access rules to
/// read (`auth.uid`, `auth.token.role`).
public struct AuthenticatedUser: Sendable, Hashable {
    /// The user id: the token's `sub` claim, `auth.uid` in access rules.
    public var uid: String
    /// Every claim of the token, `sub`, `iat` and `exp` included; rules read them as
    /// `auth.token.<claim>`.
    public var claims: JSONObject
    /// When the token stops being valid (`exp`), if it says.
    public var expiresAt: Date?

    /// A user as a verified token proves one; `BearerTokens.verify(_:now:)` makes these from tokens.
    public init(uid: String, claims: JSONObject = [:], expiresAt: Date? = nil) {
        self.uid = uid
        self.claims = claims
        self.expiresAt = expiresAt
    }
}

/// Verifies JSON Web Tokens: RS256 and ES256 tokens an identity provider signs, against its
/// published keys (``TokenKeySet``), and HS256 tokens signed with one shared secret (for
/// development: whoever holds the secret can mint any user's token). The signatures are jwt-kit's;
/// the parts and claims are read here, so a verification runs on the caller's thread with no
/// suspension, and every refusal is `unauthenticated` with a message saying what was wrong (never
/// anything about the keys).
///
/// ```swift
/// let tokens = try await BearerTokens(secret: secret)   // at least 32 bytes
/// let token = try tokens.mint(subject: "ada", lifetime: .seconds(3600), claims: ["role": "admin"])
/// let user = try tokens.verify(token)   // AuthenticatedUser(uid: "ada", …)
///
/// // Tokens from an identity provider:
/// let keys = try await TokenKeySet(url: URL(string: "https://example.auth0.com/.well-known/jwks.json")!)
/// let verified = try await BearerTokens(keys: keys, issuer: "https://example.auth0.com/", audience: "https://sync.example.com")
/// ```
public struct BearerTokens: Sendable {
    /// HS256 with the shared secret; nil when only provider tokens are taken.
    private let algorithm: (any JWTAlgorithm)?
    /// The provider's keys, for RS256 and ES256; nil when only HS256 tokens are taken.
    public let keys: TokenKeySet?
    /// The `iss` a token of the key set must carry (required with a key set; HS256 development
    /// tokens are not checked for it).
    public let issuer: String?
    /// The `aud` a token of the key set must carry or list (required with a key set).
    public let audience: String?
    /// How far the token's clock and this server's may disagree: a token is taken until `exp`
    /// plus this, and from `nbf` less this.
    public let clockSkew: Duration
    /// Longer tokens are refused unread.
    public static let maximumLength = 8_192

    /// The shortest secret taken: HMAC-SHA256 wants a key at least as long as its output.
    public static let minimumSecretBytes = 32

    /// Refuses a secret shorter than ``minimumSecretBytes``.
    public init(secret: String) async throws {
        guard secret.utf8.count >= Self.minimumSecretBytes else {
            throw TandemError.invalidArgument("The auth secret is \(secret.utf8.count) bytes; use at least \(Self.minimumSecretBytes), a long random string (say, the output of `openssl rand -hex 32`).")
        }
        try await self.init(keys: nil, secret: secret, clockSkew: .zero)
    }

    /// Tokens signed by a provider's `keys` (RS256, ES256), and, with a `secret`, HS256 tokens
    /// signed with it too.
    ///
    /// - Parameters:
    ///   - keys: the provider's public keys; nil takes HS256 tokens alone.
    ///   - secret: the shared secret of HS256 tokens (at least ``minimumSecretBytes``); nil takes
    ///     none.
    ///   - issuer: the `iss` every token of the key set must carry (the provider's:
    ///     `https://appleid.apple.com`, `https://securetoken.google.com/PROJECT`, …); required with
    ///     a key set, which its provider uses for every app it serves.
    ///   - audience: the `aud` every token of the key set must carry or list (the app's client id,
    ///     or the API's identifier); required with a key set.
    ///   - clockSkew: how far clocks may disagree, for `exp` and `nbf`. Default 60 s.
    public init(keys: TokenKeySet?, secret: String? = nil, issuer: String? = nil, audience: String? = nil, clockSkew: Duration = .seconds(60)) async throws {
        guard keys != nil || secret != nil else {
            throw TandemError.invalidArgument("Tokens need a key set (--jwks-file or --jwks-url) or a shared secret (--auth-secret) to be verified with.")
        }
        // A provider signs with one key set for every app it serves (Apple, Google and Firebase
        // share theirs): without an issuer and an audience, a token it made for another app, with
        // any user id its owner chose, would pass.
        if keys != nil, issuer == nil || audience == nil {
            throw TandemError.invalidArgument("A key set verifies tokens its identity provider signed for any app it serves: give the issuer (--token-issuer, the provider's `iss`) and the audience (--token-audience, your app's id) too, so only tokens made for this app pass.")
        }
        if let secret {
            guard secret.utf8.count >= Self.minimumSecretBytes else {
                throw TandemError.invalidArgument("The auth secret is \(secret.utf8.count) bytes; use at least \(Self.minimumSecretBytes), a long random string (say, the output of `openssl rand -hex 32`).")
            }
            let collection = JWTKeyCollection()
            await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            algorithm = try await collection.getKey(alg: "HS256")
        } else {
            algorithm = nil
        }
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.clockSkew = clockSkew
    }

    /// The user a token proves, at `now`.
    public func verify(_ token: String, now: Date = Date()) throws(TandemError) -> AuthenticatedUser {
        guard token.utf8.count <= Self.maximumLength else {
            throw Self.refusal("The token is \(token.utf8.count) bytes; at most \(Self.maximumLength) are accepted. It is malformed.")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw Self.refusal("The token is malformed: a JSON Web Token has three parts separated by dots, this one has \(parts.count).")
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let header = try? JSONText.parse(bytes: headerBytes).objectValue else {
            throw Self.refusal("The token is malformed: its header is not base64url-encoded JSON.")
        }
        let verifier = try self.verifier(for: header)
        // Tokens of the key set are the provider's: checked for whom they were made, and that they end.
        let fromProvider = header["alg"]?.stringValue != "HS256"
        guard let signature = Base64URL.decode(parts[2]) else {
            throw Self.refusal("The token is malformed: its signature is not base64url.")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard (try? verifier.verify(signature, signs: signingInput)) == true else {
            throw Self.refusal("The token's signature is not valid: it was not signed with \(header["alg"]?.stringValue == "HS256" ? "this server's secret" : "the key it names"), or it was altered.")
        }
        guard let payloadBytes = Base64URL.decode(parts[1]), let claims = try? JSONText.parse(bytes: payloadBytes).objectValue else {
            throw Self.refusal("The token is malformed: its payload is not base64url-encoded JSON.")
        }
        guard let uid = claims["sub"]?.stringValue, !uid.isEmpty else {
            throw Self.refusal("The token is malformed: it has no `sub` claim naming the user.")
        }
        let skew = Double(clockSkew.components.seconds) + Double(clockSkew.components.attoseconds) / 1e18
        // Taken until exp, and from nbf, give or take the clocks' disagreement.
        let expiresAt = try Self.date(claims["exp"], named: "exp").map { $0.addingTimeInterval(skew) }
        if let expiresAt, now >= expiresAt {
            throw Self.refusal("The token expired at \(ServerTime(expiresAt.addingTimeInterval(-skew)).iso8601); get a fresh one.", expired: true)
        }
        if let notBefore = try Self.date(claims["nbf"], named: "nbf"), now.addingTimeInterval(skew) < notBefore {
            throw Self.refusal("The token is not valid before \(ServerTime(notBefore).iso8601).")
        }
        if fromProvider, claims["exp"] == nil {
            throw Self.refusal("The token never expires (no `exp` claim); an identity provider's token must. Sign in again.")
        }
        if fromProvider, let issuer, claims["iss"]?.stringValue != issuer {
            throw Self.refusal("The token was issued by \(claims["iss"]?.stringValue.map { "'\($0.prefix(200))'" } ?? "no one (no `iss` claim)"), not by this server's identity provider; sign in with it.")
        }
        if fromProvider, let audience {
            let audiences: [String]
            switch claims["aud"] {
            case .string(let one)?: audiences = [one]
            case .array(let many)?: audiences = many.compactMap(\.stringValue)
            default: audiences = []
            }
            guard audiences.contains(audience) else {
                throw Self.refusal("The token is for \(audiences.isEmpty ? "no audience (no `aud` claim)" : audiences.map { "'\($0.prefix(100))'" }.joined(separator: ", ")), not for this server; ask the identity provider for one for this app.")
            }
        }
        return AuthenticatedUser(uid: uid, claims: claims, expiresAt: expiresAt)
    }

    /// What verifies a token with this header: the shared secret for HS256, the key set's key the
    /// header names (`kid`) for RS256 and ES256.
    private func verifier(for header: JSONObject) throws(TandemError) -> any JWTAlgorithm {
        let name = header["alg"]?.stringValue
        let accepted = (algorithm == nil ? [] : ["HS256"]) + (keys == nil ? [] : ["RS256", "ES256"])
        switch name {
        case "HS256"?:
            if let algorithm { return algorithm }
        case "RS256"?, "ES256"?:
            guard let keys else { break }
            guard let kid = header["kid"]?.stringValue else {
                throw Self.refusal("The token names no key (no `kid` in its header), so it cannot be verified; sign in with the identity provider again.")
            }
            guard let key = keys.key(named: kid) else {
                throw Self.refusal("The token is signed with a key this server does not know (kid '\(kid.prefix(100))'). If the identity provider just rotated its keys, the server is fetching them again: try again in a moment.")
            }
            guard key.algorithm == name else {
                throw Self.refusal("The token says \(name ?? "") but its key \(kid.prefix(100)) is for \(key.algorithm).")
            }
            return key.verifier
        default:
            break
        }
        throw Self.refusal("The token is signed with \(name ?? "no algorithm"); this server accepts \(accepted.joined(separator: ", ")) only.")
    }

    /// A signed token for `subject`, valid from `now` for `lifetime` (forever when nil), carrying
    /// `claims` besides `sub`, `iat` and `exp`.
    public func mint(subject: String, lifetime: Duration? = .seconds(3600), claims: JSONObject = [:], now: Date = Date()) throws -> String {
        guard !subject.isEmpty else { throw TandemError.invalidArgument("A token needs a subject (the user id).") }
        var payload = claims
        payload["sub"] = .string(subject)
        payload["iat"] = .int(Int(now.timeIntervalSince1970))
        if let lifetime {
            payload["exp"] = .int(Int((now.timeIntervalSince1970 + Double(lifetime.components.seconds)).rounded(.down)))
        }
        return try sign(payload)
    }

    /// A signed token carrying exactly `claims`.
    package func sign(_ claims: JSONObject) throws -> String {
        guard let algorithm else {
            throw TandemError(.failedPrecondition, "Tokens are minted with the shared secret (--auth-secret); this server verifies its identity provider's tokens only, which the provider mints.")
        }
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let body = Base64URL.encode(Array(JSONText.encode(claims).utf8))
        let signature = try algorithm.sign(Array("\(header).\(body)".utf8))
        return "\(header).\(body).\(Base64URL.encode(signature))"
    }

    /// An expired token's refusal has the reason ``TandemError/tokenExpired``, so a client knows a
    /// fresh token will do.
    private static func refusal(_ message: String, expired: Bool = false) -> TandemError {
        TandemError(.unauthenticated, message, reason: expired ? TandemError.tokenExpired : nil)
    }

    private static func date(_ value: JSONValue?, named name: String) throws(TandemError) -> Date? {
        guard let value else { return nil }
        guard let seconds = value.doubleValue, seconds.isFinite else {
            throw refusal("The token is malformed: its `\(name)` claim is not a number of seconds since 1970.")
        }
        return Date(timeIntervalSince1970: seconds)
    }
}
