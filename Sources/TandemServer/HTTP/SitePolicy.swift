import TandemCore

/// Which web pages may drive the server, decided from a request's head alone: the guard that keeps
/// a page a developer happens to open from reading or writing a server on their own machine.
///
/// A browser says where a request comes from (`Origin`) and whom it is for (`Host`); a native
/// client (the Tandem client, the CLI, curl) sends no `Origin`, or the `ws://` URL it dials, and
/// is not affected.
/// - **Origin.** A WebSocket upgrade, and every request that may change state (any method but
///   `GET`, `HEAD` and `OPTIONS`), that carries an `Origin` must come from the server's own origin
///   (the console it serves) or from one of ``allowedOrigins``: a page elsewhere is refused (403).
///   Browsers apply no cross-origin rule to WebSockets, and send a `text/plain` `POST` without
///   asking first, so the server must.
/// - **Body type.** A `POST`, `PUT` or `PATCH` under `/v1/` must say `Content-Type:
///   application/json` (415 otherwise): the bodies a page may send another origin without asking
///   first are form and plain-text bodies only.
/// - **Host.** A server bound to a loopback address answers only requests addressed to a loopback
///   name (`localhost`, `127.0.0.1`, `[::1]`), an allowed origin's host, or one of
///   ``allowedHosts`` (421 otherwise): a page whose own name was made to point at 127.0.0.1 (DNS
///   rebinding) addresses the server by that name, and is refused.
struct SitePolicy: Sendable, Equatable {
    /// The origins (`scheme://host[:port]`, lower-cased) whose pages may write and open streams,
    /// besides the server's own; `*` allows every origin.
    var allowedOrigins: Set<String>
    /// The host names (lower-cased, without a port) a loopback-bound server answers besides
    /// loopback names and the allowed origins' hosts; nil when any name is answered (the server is
    /// bound to an address others reach by their own names).
    var allowedHosts: Set<String>?

    /// Whether an address (an IP literal) is answered besides the names: true on a server bound to
    /// an address others reach and running open, where a name can only be a rebinding page's or
    /// one given with `allowedHosts`.
    var answersAddresses = false

    /// The policy for a server bound to `bindHost`: a loopback address checks `Host`; so does any
    /// other when the server runs `open` (no access control: a rebinding page would read and
    /// write everything), which then answers addresses, loopback names and allowed names.
    init(bindHost: String = "0.0.0.0", open: Bool = false, allowedOrigins: [String] = [], allowedHosts: [String] = []) {
        self.allowedOrigins = Set(allowedOrigins.map { Self.normalizedOrigin($0) })
        if Self.isLoopbackName(bindHost.lowercased()) || open {
            answersAddresses = !Self.isLoopbackName(bindHost.lowercased())
            var hosts = Set(allowedHosts.map { $0.lowercased() })
            for origin in self.allowedOrigins where origin != "*" {
                if let authority = Self.authority(ofOrigin: origin) { hosts.insert(authority.host) }
            }
            self.allowedHosts = hosts
        } else {
            self.allowedHosts = nil
        }
    }

    /// A refusal of the request whose head is this, or nil when it may go on.
    func refusal(method: String, target: String, host: String?, origin: String?, contentType: String?, upgrades: Bool) -> HTTPConnectionGuardStateMachine.Refusal? {
        let requested = host.flatMap(Self.authority(ofHost:))
        if let allowedHosts, let host {
            let name = requested?.host ?? String(host.prefix(100))
            if requested == nil || (!Self.isLoopbackName(name) && !allowedHosts.contains(name) && !(answersAddresses && Self.isAddress(name))) {
                let whom = answersAddresses ? "its addresses and localhost" : "localhost, 127.0.0.1 or [::1]"
                return .init(status: 421, error: TandemError(.permissionDenied, "This server \(answersAddresses ? "runs open and" : "is bound to a loopback address and") answers requests addressed to \(whom) only, not to '\(name.prefix(100))' (a guard against DNS rebinding); the connection is closed. Address it so, or start it with --allow-host NAME for a name it is reached by (or a proxy in front of it keeps in the Host header)."))
            }
        }
        let method = method.uppercased()
        if let origin, !Self.isNativeClient(origin: origin), upgrades || !["GET", "HEAD", "OPTIONS"].contains(method),
           !allows(origin: origin, requested: requested) {
            return .init(status: 403, error: TandemError(.permissionDenied, "Requests from pages on \(origin.prefix(200)) may not \(upgrades ? "open streams on" : "write to") this server; the connection is closed. Serve the page from the server's own origin, or start the server with --allow-origin \(origin.prefix(200))."))
        }
        // Only where a route takes the method: elsewhere the answer is the route's 405 or 404.
        // Spelled as the router reads it: empty segments (`/v1//commit/`) do not count.
        let path = "/" + target.prefix { $0 != "?" }.split(separator: "/").joined(separator: "/")
        if ["POST", "PUT", "PATCH"].contains(method), path.hasPrefix("/v1/"), JSONErrorMiddleware.methods(for: path)?.contains(method) == true,
           !Self.isJSON(contentType) {
            // A page on an allowed origin may read why.
            let headers = origin.map { allowsListed(origin: $0) ? ["Access-Control-Allow-Origin": $0, "Vary": "Origin"] : [:] } ?? [:]
            return .init(status: 415, error: TandemError(.invalidArgument, "The request's body is \(contentType.map { "'\($0.prefix(100))'" } ?? "of no declared type"), not JSON; the connection is closed. Send the JSON body with Content-Type: application/json."),
                         headers: headers)
        }
        return nil
    }

    /// Whether a page on `origin` may write to a server addressed as `requested`.
    func allows(origin: String, requested: (host: String, port: Int?)?) -> Bool {
        if allowsListed(origin: origin) { return true }
        let origin = Self.normalizedOrigin(origin)
        // The server's own origin: the page names the host and port the request is addressed to.
        guard let page = Self.authority(ofOrigin: origin), let requested else { return false }
        return page.host == requested.host && (page.port ?? page.defaultPort) == (requested.port ?? page.defaultPort)
    }

    /// Whether `origin` is one of ``allowedOrigins`` (or every origin is allowed): a page there may
    /// also read the HTTP API's answers (``AllowedOriginsMiddleware``).
    func allowsListed(origin: String) -> Bool {
        allowedOrigins.contains("*") || allowedOrigins.contains(Self.normalizedOrigin(origin))
    }

    /// Whether an `Origin` names a native WebSocket client rather than a page: some client
    /// libraries (swift-websocket's, which Tandem's client uses) send the `ws://` or `wss://` URL
    /// they dial. A browser sends a page's origin, which is `http`, `https` or `null`, and a page
    /// cannot choose it.
    static func isNativeClient(origin: String) -> Bool {
        let origin = origin.trimmingWhitespace.lowercased()
        return origin.hasPrefix("ws://") || origin.hasPrefix("wss://")
    }

    /// Whether a `Content-Type` value is JSON: `application/json` or `application/…+json`, with
    /// any parameters.
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let type = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingWhitespace.lowercased() } ?? ""
        return type == "application/json" || (type.hasPrefix("application/") && type.hasSuffix("+json"))
    }

    /// Whether a host is an IP literal: a dotted IPv4 address or a bracketed IPv6 one.
    static func isAddress(_ host: String) -> Bool {
        if host.hasPrefix("[") && host.hasSuffix("]") { return host.dropFirst().dropLast().allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." } }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Whether a host name (lower-cased, brackets kept on IPv6) names this machine's loopback.
    static func isLoopbackName(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "[::1]" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// `scheme://host[:port]`, lower-cased, without a trailing slash, and without the port its
    /// scheme implies (browsers send `https://app.example`, never `https://app.example:443`).
    static func normalizedOrigin(_ origin: String) -> String {
        var text = String(origin.trimmingWhitespace.lowercased())
        while text.hasSuffix("/") { text.removeLast() }
        for (scheme, port) in [("https://", ":443"), ("http://", ":80")] where text.hasPrefix(scheme) && text.hasSuffix(port) {
            text.removeLast(port.count)
        }
        return text
    }

    /// The host and port of an origin, and the port its scheme implies.
    static func authority(ofOrigin origin: String) -> (host: String, port: Int?, defaultPort: Int)? {
        let origin = normalizedOrigin(origin)
        guard let separator = origin.range(of: "://") else { return nil }
        let scheme = origin[..<separator.lowerBound]
        guard let split = authority(ofHost: String(origin[separator.upperBound...])) else { return nil }
        return (split.host, split.port, scheme == "https" || scheme == "wss" ? 443 : 80)
    }

    /// The host (lower-cased) and port of a `Host` header value.
    static func authority(ofHost value: String) -> (host: String, port: Int?)? {
        let text = value.trimmingWhitespace.lowercased()
        guard !text.isEmpty else { return nil }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let host = String(text[...close])
            let rest = text[text.index(after: close)...]
            if rest.isEmpty { return (host, nil) }
            guard rest.first == ":", let port = Int(rest.dropFirst()) else { return nil }
            return (host, port)
        }
        guard let colon = text.lastIndex(of: ":") else { return (String(text), nil) }
        guard let port = Int(text[text.index(after: colon)...]) else { return nil }
        return (String(text[..<colon]), port)
    }
}
