import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JWTKit
import Logging
import ServiceLifecycle
import Synchronization
import TandemCore

/// The public keys that verify tokens an identity provider signs (RS256, ES256): a JSON Web Key Set
/// (JWKS), read from a file or fetched from a URL, the way Sign in with Apple, Firebase Auth,
/// Auth0, Supabase Auth and Keycloak publish theirs.
///
/// A set fetched from a URL is a `Service`: run it (the server runs the one its ``BearerTokens``
/// hold) and it fetches the set again when the answer's `Cache-Control: max-age` (or `Expires`)
/// runs out — between a minute and a day; an hour when the answer says nothing — and, at most once
/// every ``unknownKeyInterval``, when a token names a key it does not hold (the provider rotated
/// its keys). A failed fetch is logged and tried again a minute later; the keys it had stay in use.
///
/// ```swift
/// let keys = try await TokenKeySet(url: URL(string: "https://appleid.apple.com/auth/keys")!)
/// let tokens = try await BearerTokens(keys: keys, issuer: "https://appleid.apple.com", audience: "com.example.notes")
/// ```
public final class TokenKeySet: Service, Sendable {
    /// One key of the set: the algorithm it verifies and the verifier.
    struct Key: Sendable {
        var algorithm: String
        var verifier: any JWTAlgorithm
    }

    /// Fetches a key set: its bytes, and how long they may be kept (nil: the answer did not say).
    public typealias Fetch = @Sendable (URL) async throws -> (data: Data, lifetime: Duration?)

    /// The shortest time between two fetches for a key the set does not hold.
    public static let unknownKeyInterval: Duration = .seconds(30)

    private struct State {
        var keys: [String: Key] = [:]
        /// When the set was last fetched, on the clock; nil before the first.
        var fetchedAt: Duration?
        /// How long the last answer may be kept.
        var lifetime: Duration = .seconds(3600)
        /// When a fetch for an unknown key was last asked for.
        var askedAt: Duration?
        /// Fetches done, for tests awaiting one.
        var fetches = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    /// Where the set comes from: nil for a fixed set (a file, or text).
    let url: URL?
    private let fetch: Fetch?
    private let clock: ServerClock
    private let logger: Logger
    private let wakeUps: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    /// A fixed key set from a JWKS document's text.
    public convenience init(json: String) async throws(TandemError) {
        self.init(source: nil, fetch: nil, clock: ContinuousClock(), logger: Logger(label: "tandem.keys"))
        let keys = try await Self.keys(from: Data(json.utf8), source: "the key set")
        state.withLock { $0.keys = keys }
    }

    /// A fixed key set read from a JWKS file.
    public convenience init(contentsOfFile path: String) async throws(TandemError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw TandemError(.notFound, "Cannot read the key set \(path): \(describeFileError(error)). Check the path (--jwks-file).")
        }
        self.init(source: nil, fetch: nil, clock: ContinuousClock(), logger: Logger(label: "tandem.keys"))
        let keys = try await Self.keys(from: data, source: path)
        state.withLock { $0.keys = keys }
    }

    /// A key set fetched from `url` now (so a wrong URL stops a server at start) and again as its
    /// answers' cache headers say, once ``run()`` runs.
    ///
    /// - Parameters:
    ///   - url: where the provider publishes its key set (`https://appleid.apple.com/auth/keys`).
    ///   - fetch: how the set is fetched; the default is an HTTP GET that reads `Cache-Control:
    ///     max-age` and `Expires`.
    ///   - clock: the clock the refreshes run on; tests pass a manual one.
    ///   - logger: where a failed refresh is logged.
    public convenience init(url: URL, fetch: Fetch? = nil, clock: any Clock<Duration> = ContinuousClock(),
                            logger: Logger = Logger(label: "tandem.keys")) async throws(TandemError) {
        self.init(source: url, fetch: fetch ?? Self.httpFetch, clock: clock, logger: logger)
        try await refresh()
    }

    private init(source url: URL?, fetch: Fetch?, clock: any Clock<Duration>, logger: Logger) {
        self.url = url
        self.fetch = fetch
        self.clock = ServerClock(clock)
        self.logger = logger
        (wakeUps, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The key ids the set holds, sorted.
    public var keyIDs: [String] { state.withLock { $0.keys.keys.sorted() } }

    /// The key named `kid`; nil when the set holds none by that name, in which case a set fetched
    /// from a URL is fetched again soon (a provider that rotated its keys signs with a new one).
    func key(named kid: String) -> Key? {
        let instant = clock.now()
        let (key, ask) = state.withLock { state -> (Key?, Bool) in
            if let key = state.keys[kid] { return (key, false) }
            guard url != nil else { return (nil, false) }
            if let asked = state.askedAt, instant - asked < Self.unknownKeyInterval { return (nil, false) }
            state.askedAt = instant
            return (nil, true)
        }
        if ask { wake.yield() }
        return key
    }

    /// Fetches the set now and puts its keys in place of the ones held.
    public func refresh() async throws(TandemError) {
        guard let url, let fetch else { return }
        let answer: (data: Data, lifetime: Duration?)
        do {
            answer = try await fetch(url)
        } catch {
            throw TandemError(.unavailable, "Cannot fetch the key set from \(url.absoluteString): \(error). Check the URL (--jwks-url) and that this machine reaches it.", cause: error)
        }
        let keys = try await Self.keys(from: answer.data, source: url.absoluteString)
        let instant = clock.now()
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.keys = keys
            state.fetchedAt = instant
            state.lifetime = min(max(answer.lifetime ?? .seconds(3600), .seconds(60)), .seconds(86_400))
            state.fetches += 1
            let count = state.fetches
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        ready.forEach { $0.resume() }
    }

    /// Returns once the set has been fetched `count` times in all (the first fetch counts).
    package func waitForFetches(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.fetches >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Keeps a set fetched from a URL fresh until the service group shuts down: again when the
    /// last answer's lifetime runs out, or soon after a token named a key it does not hold. A fixed
    /// set has nothing to do: it waits for the shutdown (a service that returns early ends its
    /// group).
    public func run() async throws {
        guard url != nil else {
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                // The timer: fetches the set again itself when its lifetime runs out. Every attempt,
                // failed or not, moves the deadline on (a failure by a minute), so it never spins.
                let clock = self.clock
                group.addTask {
                    while !Task.isCancelled {
                        let deadline = self.state.withLock { state in (state.fetchedAt ?? .zero) + state.lifetime }
                        do {
                            try await clock.sleepUntil(deadline)
                        } catch {
                            return
                        }
                        let due = self.state.withLock { state in clock.now() >= (state.fetchedAt ?? .zero) + state.lifetime }
                        if due { await self.refreshLogging() }
                    }
                }
                // A token named a key the set does not hold (at most once an interval).
                for await _ in self.wakeUps {
                    await self.refreshLogging()
                }
                group.cancelAll()
            }
        }
        wake.finish()
    }

    /// Fetches the set again; a failure is logged, the keys held stay, and the next attempt comes
    /// a minute later.
    private func refreshLogging() async {
        do {
            try await refresh()
        } catch {
            logger.warning("the key set could not be fetched again; the keys held stay in use, and it is tried again in a minute: \(error.message)")
            let now = clock.now()
            state.withLock { state in
                state.fetchedAt = now
                state.lifetime = .seconds(60)
            }
        }
    }

    // MARK: Reading a key set

    /// The RS256 and ES256 keys of a JWKS document, by key id. Keys of other kinds, or without a
    /// key id, are left out (a set may hold encryption keys too); a set with none is refused.
    static func keys(from data: Data, source: String) async throws(TandemError) -> [String: Key] {
        guard case .object(let document)? = try? JSONText.parse(bytes: data), case .array(let entries)? = document["keys"] else {
            throw TandemError.invalidArgument("\(source) is not a JSON Web Key Set: expected a JSON object with a \"keys\" array.")
        }
        var keys: [String: Key] = [:]
        for entry in entries {
            guard case .object(let object) = entry, let kid = object["kid"]?.stringValue else { continue }
            let algorithm: String
            switch (object["kty"]?.stringValue, object["alg"]?.stringValue, object["crv"]?.stringValue) {
            case ("RSA", "RS256"?, _), ("RSA", nil, _): algorithm = "RS256"
            case ("EC", "ES256"?, "P-256"?), ("EC", nil, "P-256"?): algorithm = "ES256"
            default: continue
            }
            if let use = object["use"]?.stringValue, use != "sig" { continue }
            // jwt-kit makes the verifier from the key's public parts.
            var publicParts = object.filter { ["kty", "kid", "n", "e", "crv", "x", "y"].contains($0.key) }
            publicParts["alg"] = .string(algorithm)
            do {
                let jwk = try JSONDecoder().decode(JWK.self, from: Data(JSONText.encode(.object(publicParts)).utf8))
                let collection = JWTKeyCollection()
                try await collection.add(jwk: jwk)
                keys[kid] = Key(algorithm: algorithm, verifier: try await collection.getKey(for: JWKIdentifier(string: kid), alg: algorithm))
            } catch {
                throw TandemError.invalidArgument("The key \(kid) of \(source) cannot be read as an \(algorithm) public key: \(error).")
            }
        }
        guard !keys.isEmpty else {
            throw TandemError.invalidArgument("\(source) holds no RS256 or ES256 signing key with a key id (kid); tokens could not be verified with it.")
        }
        return keys
    }

    // MARK: Fetching

    /// An HTTP GET; the lifetime is the answer's `Cache-Control: max-age`, else its `Expires`.
    static let httpFetch: Fetch = { url in
        var request = URLRequest(url: url, timeoutInterval: 30)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let (data, response) = try await URLSession.shared.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw TandemError(.unavailable, "no HTTP answer") }
        guard (200..<300).contains(http.statusCode) else { throw TandemError(.unavailable, "HTTP \(http.statusCode)") }
        return (data, lifetime(cacheControl: http.value(forHTTPHeaderField: "Cache-Control"), expires: http.value(forHTTPHeaderField: "Expires"), now: Date()))
    }

    /// How long an answer may be kept: `max-age` (`no-store` and `no-cache`: not at all), else
    /// what `Expires` leaves from `now`; nil when neither says.
    package static func lifetime(cacheControl: String?, expires: String?, now: Date) -> Duration? {
        if let cacheControl {
            for directive in cacheControl.lowercased().split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                if directive == "no-store" || directive == "no-cache" { return .zero }
                if directive.hasPrefix("max-age="), let seconds = Int(directive.dropFirst("max-age=".count)) { return .seconds(max(0, seconds)) }
            }
        }
        if let expires {
            let format = DateFormatter()
            format.locale = Locale(identifier: "en_US_POSIX")
            format.timeZone = TimeZone(identifier: "GMT")
            format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
            if let date = format.date(from: expires) { return .seconds(max(0, Int(date.timeIntervalSince(now)))) }
        }
        return nil
    }
}
