import Synchronization
import TandemCore

/// Where a ``TandemClient`` gets the bearer token it says hello with: asked before every
/// connection attempt, so a fresh one can be given each time. Nil means signed out (the client
/// connects anonymously). An error fails that attempt, which is retried on the reconnect backoff.
public typealias TokenProvider = @Sendable () async throws -> String?

/// Who the client is signed in as, as the server confirmed it in its welcome.
public enum AuthState: Sendable, Hashable, CustomStringConvertible {
    /// No token, or one the server refused: requests go anonymously.
    case signedOut
    /// The server accepted the token of user `uid`.
    case signedIn(uid: String)

    /// The signed-in user's id; nil when signed out.
    public var uid: String? {
        if case .signedIn(let uid) = self { return uid }
        return nil
    }

    public var description: String {
        switch self {
        case .signedOut: "signed out"
        case .signedIn(let uid): "signed in as \(uid)"
        }
    }
}

/// The token provider, in a class box.
final class TokenSource: Sendable {
    let token: TokenProvider
    init(_ token: @escaping TokenProvider) { self.token = token }
}

extension TandemClient {
    /// Who the client is signed in as now. `signedOut` until a server has welcomed a token.
    public var authState: AuthState { state.withLock { $0.authState } }

    /// Whether the client has credentials to follow: a token provider or a fixed token. Engines
    /// bound to such a client follow its ``authState``: signed out, their listeners detach and
    /// their outboxes wait; signed in again, each attaches once and sends.
    public var usesCredentials: Bool { tokenSource != nil }

    /// Calls `handler` with each change of ``authState``, in order, until the observation is
    /// cancelled or freed; with the state now first.
    public func observeAuthState(_ handler: @escaping @Sendable (AuthState) -> Void) -> ConnectionObservation {
        let observer = AuthObserver(handler)
        let (token, tell) = state.withLock { state -> (Int, Bool) in
            state.nextConnectionObserver += 1
            state.authObservers[state.nextConnectionObserver] = observer
            return (state.nextConnectionObserver, Self.queue(.auth(state.authState, [observer]), in: &state))
        }
        if tell { tellConnectionEvents() }
        return ConnectionObservation { [weak self] in
            _ = self?.state.withLock { $0.authObservers.removeValue(forKey: token) }
        }
    }

    /// Each change of ``authState``, with the state now first, until the stream is dropped.
    public func authStates() -> AsyncStream<AuthState> {
        let (stream, continuation) = AsyncStream.makeStream(of: AuthState.self)
        let observation = observeAuthState { continuation.yield($0) }
        continuation.onTermination = { _ in observation.cancel() }
        return stream
    }

    /// Asks the token provider again and reconnects with what it gives: call it when the user signs
    /// in, signs out, or switches accounts. Listeners resume on the new connection; engines follow
    /// the new ``authState``. Writes queued meanwhile are kept and sent once a connection is up.
    public func refreshToken() {
        connectionEvent { $0.renew() }
    }

    /// The hello for the next attempt, with a token from the provider; records `signedOut` when
    /// there is none. The client id is the device's whoever signs in: the server makes the
    /// principal from the two (the token's user, and this device).
    func helloForNextAttempt() async throws -> String {
        guard let tokenSource else { return ClientMessage.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: nil).text }
        let token = try await tokenSource.token()
        if token == nil { setAuthState(.signedOut) }
        return ClientMessage.hello(clientID: clientID, protocolVersion: TandemVersion.wireProtocol, token: token).text
    }

    /// Records the auth state and tells its observers when it changed.
    func setAuthState(_ new: AuthState) {
        let tell = state.withLock { state -> Bool in
            guard state.authState != new else { return false }
            state.authState = new
            return Self.queue(.auth(new, Array(state.authObservers.values)), in: &state)
        }
        if tell { tellConnectionEvents() }
    }
}

/// A ``TandemClient``'s state as a view shows it: the connection, and who is signed in.
public struct ClientStatus: Sendable, Hashable, CustomStringConvertible {
    /// Whether the client is connected, on its way, or not trying.
    public enum Connection: Sendable, Hashable {
        /// Not connected, and on its way: an attempt under way, or waiting out the reconnect backoff.
        case connecting
        /// Connected, and welcomed by the server.
        case connected
        /// Not trying: taken offline (`setOnline(false)`), not running yet, or stopped.
        case offline
    }

    /// Where the connection is.
    public var connection: Connection
    /// Who the server confirmed is signed in.
    public var auth: AuthState

    /// A status with this connection and auth state.
    public init(connection: Connection, auth: AuthState) {
        self.connection = connection
        self.auth = auth
    }

    public var description: String { "\(connection), \(auth)" }
}
