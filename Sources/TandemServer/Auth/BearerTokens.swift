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

/// Verifies and mints HS256 JSON Web Tokens with one shared secret. The signature is jwt-kit's
/// HMAC-SHA256; the parts and claims are read here, so a verification runs on the caller's thread
/// with no suspension, and every refusal is `unauthenticated` with a message saying what was wrong
/// (never anything about the secret).
///
/// ```swift
/// let tokens = try await BearerTokens(secret: secret)   // at least 32 bytes
/// let token = try tokens.mint(subject: "ada", lifetime: .seconds(3600), claims: ["role": "admin"])
/// let user = try tokens.verify(token)   // AuthenticatedUser(uid: "ada", …)
/// ```
public struct BearerTokens: Sendable {
    private let algorithm: any JWTAlgorithm
    /// Longer tokens are refused unread.
    public static let maximumLength = 8_192

    /// The shortest secret taken: HMAC-SHA256 wants a key at least as long as its output.
    public static let minimumSecretBytes = 32

    /// Refuses a secret shorter than ``minimumSecretBytes``.
    public init(secret: String) async throws {
        guard secret.utf8.count >= Self.minimumSecretBytes else {
            throw TandemError.invalidArgument("The auth secret is \(secret.utf8.count) bytes; use at least \(Self.minimumSecretBytes), a long random string (say, the output of `openssl rand -hex 32`).")
        }
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        algorithm = try await keys.getKey(alg: "HS256")
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
        guard header["alg"]?.stringValue == "HS256" else {
            throw Self.refusal("The token is signed with \(header["alg"]?.stringValue ?? "no algorithm"); this server accepts HS256 only.")
        }
        guard let signature = Base64URL.decode(parts[2]) else {
            throw Self.refusal("The token is malformed: its signature is not base64url.")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard (try? algorithm.verify(signature, signs: signingInput)) == true else {
            throw Self.refusal("The token's signature is not valid: it was not signed with this server's secret, or it was altered.")
        }
        guard let payloadBytes = Base64URL.decode(parts[1]), let claims = try? JSONText.parse(bytes: payloadBytes).objectValue else {
            throw Self.refusal("The token is malformed: its payload is not base64url-encoded JSON.")
        }
        guard let uid = claims["sub"]?.stringValue, !uid.isEmpty else {
            throw Self.refusal("The token is malformed: it has no `sub` claim naming the user.")
        }
        let expiresAt = try Self.date(claims["exp"], named: "exp")
        if let expiresAt, now >= expiresAt {
            throw Self.refusal("The token expired at \(ServerTime(expiresAt).iso8601); get a fresh one.", expired: true)
        }
        if let notBefore = try Self.date(claims["nbf"], named: "nbf"), now < notBefore {
            throw Self.refusal("The token is not valid before \(ServerTime(notBefore).iso8601).")
        }
        return AuthenticatedUser(uid: uid, claims: claims, expiresAt: expiresAt)
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
