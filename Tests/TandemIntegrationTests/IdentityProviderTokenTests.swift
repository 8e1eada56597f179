import CryptoExtras
import Foundation
import Hummingbird
import JWTKit
import Logging
import Synchronization
import Testing
import TandemCore
import TandemServer
import TandemTesting

/// Tokens an identity provider signs (RS256, ES256), verified against its JSON Web Key Set: from a
/// file, and from a URL (a local HTTP server the tests run) fetched again on its cache headers and
/// on a key id it does not hold; `iss`, `aud` and clock skew; and through a live server's hello.
@Suite("Identity-provider tokens", .timeLimit(.minutes(5)))
struct IdentityProviderTokenTests {
    /// A signing key as a provider holds it: its id, algorithm, signer and public JWK.
    struct ProviderKey: Sendable {
        var kid: String
        var algorithm: String
        var signer: any JWTAlgorithm
        var jwk: JSONObject

        static func rsa(_ kid: String) async throws -> ProviderKey {
            let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
            let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
            let keys = JWTKeyCollection()
            await keys.add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
            return ProviderKey(kid: kid, algorithm: "RS256", signer: try await keys.getKey(for: JWKIdentifier(string: kid)), jwk: [
                "kty": "RSA", "kid": .string(kid), "use": "sig", "alg": "RS256",
                "n": .string(Base64URL.encode(Array(modulus))), "e": .string(Base64URL.encode(Array(exponent))),
            ])
        }

        static func ec(_ kid: String) async throws -> ProviderKey {
            let key = ES256PrivateKey()
            let parameters = try #require(key.parameters)
            let keys = JWTKeyCollection()
            await keys.add(ecdsa: key, kid: JWKIdentifier(string: kid))
            return ProviderKey(kid: kid, algorithm: "ES256", signer: try await keys.getKey(for: JWKIdentifier(string: kid)), jwk: [
                "kty": "EC", "kid": .string(kid), "crv": "P-256", "x": .string(parameters.x), "y": .string(parameters.y),
            ])
        }

        /// A token with these claims, signed with this key (`alg` and `kid` as a header can lie).
        func sign(_ claims: JSONObject, alg: String? = nil, kid: String? = nil) throws -> String {
            let header = Base64URL.encode(Array(JSONText.encode(["alg": .string(alg ?? algorithm), "kid": .string(kid ?? self.kid), "typ": "JWT"]).utf8))
            let body = Base64URL.encode(Array(JSONText.encode(.object(claims)).utf8))
            let signature = try signer.sign(Array("\(header).\(body)".utf8))
            return "\(header).\(body).\(Base64URL.encode(signature))"
        }
    }

    static func jwks(_ keys: [ProviderKey]) -> String {
        JSONText.encode(["keys": .array(keys.map { .object($0.jwk) })])
    }

    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let issuer = "https://id.example"
    static let audience = "com.example.notes"

    static func claims(_ uid: String, expiresIn: TimeInterval = 3600, extra: JSONObject = [:]) -> JSONObject {
        var claims: JSONObject = ["sub": .string(uid), "iss": .string(issuer), "aud": .string(audience),
                                  "iat": .int(Int(now.timeIntervalSince1970)), "exp": .int(Int(now.timeIntervalSince1970 + expiresIn))]
        claims.merge(extra) { $1 }
        return claims
    }

    func refusal(_ tokens: BearerTokens, _ token: String, at date: Date = IdentityProviderTokenTests.now) -> String? {
        do {
            _ = try tokens.verify(token, now: date)
            return nil
        } catch {
            #expect(error.code == .unauthenticated)
            return error.message
        }
    }

    @Test("a key set file verifies RS256 and ES256 tokens; issuer, audience, clock skew, unknown and mismatched keys, tampering and HS256 are each told")
    func keySetFromAFile() async throws {
        let rsa = try await ProviderKey.rsa("rsa-1")
        let ec = try await ProviderKey.ec("ec-1")
        let directory = TemporaryDirectory()
        let file = directory.url.appendingPathComponent("jwks.json")
        // A set may hold keys that verify nothing here (an encryption key): they are left out.
        let set = JSONText.encode(["keys": [.object(rsa.jwk), .object(ec.jwk), ["kty": "oct", "kid": "secret", "k": "AAAA"]]])
        try set.write(to: file, atomically: true, encoding: .utf8)
        let keys = try await TokenKeySet(contentsOfFile: file.path)
        #expect(keys.keyIDs == ["ec-1", "rsa-1"])
        let tokens = try await BearerTokens(keys: keys, issuer: Self.issuer, audience: Self.audience)

        let ada = try tokens.verify(try rsa.sign(Self.claims("ada")), now: Self.now)
        #expect(ada.uid == "ada" && ada.claims["iss"] == .string(Self.issuer))
        #expect(try tokens.verify(try ec.sign(Self.claims("bob", extra: ["aud": [.string("other"), .string(Self.audience)]])), now: Self.now).uid == "bob")

        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", extra: ["iss": "https://evil.example"])))?.contains("issued by 'https://evil.example'") == true)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", extra: ["aud": "another.app"])))?.contains("not for this server") == true)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", extra: ["aud": .null])))?.contains("no audience") == true)
        // Clocks may disagree by a minute: expired 30 s ago passes, 90 s ago does not; nbf likewise.
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", expiresIn: -30))) == nil)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", expiresIn: -90)))?.contains("expired") == true)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", extra: ["nbf": .int(Int(Self.now.timeIntervalSince1970) + 30)]))) == nil)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada", extra: ["nbf": .int(Int(Self.now.timeIntervalSince1970) + 90)])))?.contains("not valid before") == true)
        // A token's user expires with the skew, so a stream's deadline agrees with the check.
        #expect(ada.expiresAt == Self.now.addingTimeInterval(3600 + 60))

        #expect(refusal(tokens, try rsa.sign(Self.claims("ada"), kid: "rsa-9"))?.contains("does not know (kid 'rsa-9')") == true)
        #expect(refusal(tokens, try rsa.sign(Self.claims("ada"), alg: "ES256"))?.contains("is for RS256") == true)
        let forged = try ec.sign(Self.claims("ada"), kid: "ec-1")
        let tampered = forged.split(separator: ".").enumerated().map { $0.offset == 1 ? Substring(Base64URL.encode(Array(JSONText.encode(.object(Self.claims("eve"))).utf8))) : $0.element }.joined(separator: ".")
        #expect(refusal(tokens, tampered)?.contains("signature is not valid") == true)
        #expect(refusal(tokens, try await BearerTokens(secret: "a-development-secret-long-enough-to-use").mint(subject: "ada", now: Self.now))?.contains("accepts RS256, ES256 only") == true)

        // A set with no key tokens can be verified with, and a file that is no key set, are refused at start.
        let empty = directory.url.appendingPathComponent("empty.json")
        try #"{"keys": [{"kty": "oct", "kid": "x", "k": "AAAA"}]}"#.write(to: empty, atomically: true, encoding: .utf8)
        await #expect(throws: TandemError.self) { _ = try await TokenKeySet(contentsOfFile: empty.path) }
        await #expect(throws: TandemError.self) { _ = try await TokenKeySet(json: "[1, 2]") }
    }

    @Test("a key set needs an issuer and an audience; HS256 stays for development beside it, unchecked for them; a provider's token must expire; a server with a key set alone mints nothing")
    func secretBesideKeys() async throws {
        let ec = try await ProviderKey.ec("ec-1")
        let keys = try await TokenKeySet(json: Self.jwks([ec]))
        // The provider's keys sign every app's tokens: without iss and aud, another app's would pass.
        await #expect(throws: TandemError.self) { _ = try await BearerTokens(keys: keys) }
        await #expect(throws: TandemError.self) { _ = try await BearerTokens(keys: keys, issuer: Self.issuer) }
        let both = try await BearerTokens(keys: keys, secret: "a-development-secret-long-enough-to-use", issuer: Self.issuer, audience: Self.audience)
        #expect(try both.verify(try both.mint(subject: "dev", now: Self.now), now: Self.now).uid == "dev", "a development token has no iss or aud")
        #expect(try both.verify(try ec.sign(Self.claims("ada")), now: Self.now).uid == "ada")
        var forever = Self.claims("ada")
        forever["exp"] = nil
        #expect(refusal(both, try ec.sign(forever))?.contains("never expires") == true)
        let providerOnly = try await BearerTokens(keys: keys, issuer: Self.issuer, audience: Self.audience)
        #expect(throws: TandemError.self) { _ = try providerOnly.mint(subject: "x") }
    }

    /// An HTTP server serving `jwks()` at `/jwks.json` with `Cache-Control: max-age=600`.
    static func keyServer(_ jwks: @escaping @Sendable () -> String) async throws -> (url: URL, task: Task<Void, any Error>) {
        let router = Router()
        router.get("/jwks.json") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=600"],
                     body: .init(byteBuffer: ByteBuffer(string: jwks())))
        }
        var logger = Logger(label: "jwks")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        let task = Task { try await app.run() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        return (URL(string: "http://127.0.0.1:\(port)/jwks.json")!, task)
    }

    @Test("a key set fetched from a URL: a rotated key is fetched when a token names it, a removed key stops verifying, and the set is fetched again when its max-age runs out")
    func keySetFromAURL() async throws {
        let old = try await ProviderKey.rsa("2025")
        let new = try await ProviderKey.ec("2026")
        let published = Mutex([old])
        let (url, server) = try await Self.keyServer { Self.jwks(published.withLock { $0 }) }
        defer { server.cancel() }
        let clock = ManualClock()
        let keys = try await TokenKeySet(url: url, clock: clock)
        let tokens = try await BearerTokens(keys: keys, issuer: Self.issuer, audience: Self.audience)
        let refresher = Task { try await keys.run() }
        defer { refresher.cancel() }
        #expect(try tokens.verify(try old.sign(Self.claims("ada")), now: Self.now).uid == "ada")

        // The provider rotates: the new key replaces the old one.
        published.withLock { $0 = [new] }
        let rotated = try new.sign(Self.claims("ada"))
        #expect(refusal(tokens, rotated)?.contains("fetching them again") == true)
        await keys.waitForFetches(2)
        #expect(try tokens.verify(rotated, now: Self.now).uid == "ada")
        #expect(refusal(tokens, try old.sign(Self.claims("ada")))?.contains("does not know (kid '2025')") == true, "a removed key verifies nothing")
        // Unknown keys do not make it fetch again and again: once per interval.
        #expect(refusal(tokens, try old.sign(Self.claims("ada"), kid: "2027")) != nil)
        #expect(keys.keyIDs == ["2026"])

        // The answer said max-age=600: ten minutes on, the set is fetched again by itself.
        published.withLock { $0 = [new, old] }
        await clock.waitForSleepers { $0.contains(.init(offset: .seconds(600))) }
        clock.advance(by: .seconds(600))
        await keys.waitForFetches(3)
        #expect(keys.keyIDs == ["2025", "2026"])
    }

    @Test("the cache headers set a key set's lifetime: max-age, no-store, Expires, or nothing")
    func cacheLifetimes() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(TokenKeySet.lifetime(cacheControl: "public, max-age=21600, must-revalidate", expires: nil, now: now) == .seconds(21600))
        #expect(TokenKeySet.lifetime(cacheControl: "no-store", expires: nil, now: now) == .zero)
        #expect(TokenKeySet.lifetime(cacheControl: nil, expires: "Fri, 15 Jan 2027 09:00:00 GMT", now: now) == .seconds(3600))
        #expect(TokenKeySet.lifetime(cacheControl: "public", expires: "Fri, 15 Jan 2027 07:00:00 GMT", now: now) == .zero)
        #expect(TokenKeySet.lifetime(cacheControl: nil, expires: nil, now: now) == nil)
    }

    @Test("tandem serve --jwks-file with --token-issuer and --token-audience takes the provider's tokens; contradictory flags stop it at start")
    func serveWithAKeySetFile() async throws {
        try #require(CLIProcess.executable != nil, "tandem is not built; run `swift build --build-tests` first")
        let key = try await ProviderKey.ec("cli")
        let directory = TemporaryDirectory()
        let file = directory.url.appendingPathComponent("jwks.json")
        try Self.jwks([key]).write(to: file, atomically: true, encoding: .utf8)
        let server = try RunningProcess(["serve", "--port", "0", "--data-dir", directory.url.appendingPathComponent("data").path,
                                         "--jwks-file", file.path, "--token-issuer", Self.issuer, "--token-audience", Self.audience])
        let line = try #require(await server.nextLine(), "tandem serve printed nothing")
        let url = String(line.dropFirst("listening on ".count))
        let now = Int(Date().timeIntervalSince1970)
        var claims = Self.claims("ada")
        claims["iat"] = .int(now)
        claims["exp"] = .int(now + 600)
        var result = try await CLIProcess.run(["set", "users/ada/notes/1", #"{"n": 1}"#, "--url", url, "--token", try key.sign(claims)])
        #expect(result.status == 0, "\(result.err)")
        claims["aud"] = "another.app"
        result = try await CLIProcess.run(["get", "users/ada/notes/1", "--url", url, "--token", try key.sign(claims)])
        #expect(result.status == 1 && result.err.contains("unauthenticated") && result.err.contains("not for this server"), "\(result.err)")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)

        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--jwks-file", file.path, "--jwks-url", "https://id.example/jwks.json"])
        #expect(result.status == 2 && result.err.contains("give one of them"), "\(result.err)")
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--token-audience", Self.audience])
        #expect(result.status == 2 && result.err.contains("--token-audience"), "\(result.err)")
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--jwks-file", file.path])
        #expect(result.status == 2 && result.err.contains("--token-issuer") && result.err.contains("--token-audience"), "a key set without issuer and audience: \(result.err)")
        result = try await CLIProcess.run(["serve", "--port", "0", "--data-dir", directory.url.path, "--jwks-file", directory.url.appendingPathComponent("missing.json").path])
        #expect(result.status == 2 && result.err.contains("Check the path (--jwks-file)"), "\(result.err)")
    }

    @Test("a live server with a key set welcomes a provider's token over the stream and refuses one for another audience")
    func liveServer() async throws {
        let key = try await ProviderKey.ec("live")
        let tokens = try await BearerTokens(keys: try await TokenKeySet(json: Self.jwks([key])), issuer: Self.issuer, audience: Self.audience)
        var configuration = SyncServerConfiguration()
        configuration.access = AccessControl(tokens: tokens, now: { Self.now })
        let server = try await LiveServer.start(configuration: configuration)
        let ada = RawStream(port: server.port)
        ada.send(.hello(clientID: "phone", protocolVersion: TandemVersion.wireProtocol, token: try key.sign(Self.claims("ada"))))
        guard case .welcome(_, _, _, let user)? = await ada.next() else { Issue.record("expected welcome"); return }
        #expect(user == "ada")
        let other = RawStream(port: server.port)
        other.send(.hello(clientID: "phone", protocolVersion: TandemVersion.wireProtocol, token: try key.sign(Self.claims("ada", extra: ["aud": "another.app"]))))
        guard case .error(_, let refused)? = await other.next() else { Issue.record("expected the hello refused"); return }
        #expect(refused.code == .unauthenticated && refused.message.contains("not for this server"))
        await ada.close()
        await other.close()
        await server.stop()
    }
}
