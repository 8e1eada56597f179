import Testing
@testable import TandemServer

/// Which web pages may drive a server, from a request's head alone.
@Suite("Site policy")
struct SitePolicyTests {
    func status(_ policy: SitePolicy, _ method: String = "POST", _ target: String = "/v1/commit", host: String? = "127.0.0.1:8080",
                origin: String? = nil, type: String? = "application/json", upgrades: Bool = false) -> Int? {
        policy.refusal(method: method, target: target, host: host, origin: origin, contentType: type, upgrades: upgrades)?.status
    }

    @Test("a page on another origin may not write or open a stream; its reads, native clients and the server's own pages are not affected")
    func origins() {
        let local = SitePolicy(bindHost: "127.0.0.1")
        #expect(status(local, origin: "https://evil.example") == 403)
        #expect(status(local, "PUT", "/v1/documents/a/b", origin: "http://127.0.0.1:9999") == 403, "another port is another origin")
        #expect(status(local, "DELETE", "/v1/documents/a/b", origin: "null", type: nil) == 403, "an opaque origin")
        #expect(status(local, "GET", "/v1/stream", origin: "https://evil.example", type: nil, upgrades: true) == 403)
        #expect(status(local, "GET", "/v1/documents/a/b", origin: "https://evil.example", type: nil) == nil, "a read's answer the browser keeps from the page")
        #expect(status(local, origin: nil) == nil, "no Origin: a native client")
        #expect(status(local, "GET", "/v1/stream", origin: "ws://127.0.0.1", type: nil, upgrades: true) == nil, "a native WebSocket client's dialled URL")
        #expect(status(local, "GET", "/v1/stream", origin: "chrome-extension://abc", type: nil, upgrades: true) == 403)
        #expect(status(local, origin: "http://127.0.0.1:8080") == nil, "the server's own console")
        #expect(status(local, "GET", "/v1/stream", origin: "HTTP://127.0.0.1:8080/", type: nil, upgrades: true) == nil)
        // Behind a TLS proxy: the page's origin has no port, the Host none either.
        let exposed = SitePolicy(bindHost: "0.0.0.0")
        #expect(status(exposed, host: "sync.example.com", origin: "https://sync.example.com") == nil)
        #expect(status(exposed, host: "sync.example.com", origin: "https://sync.example.com:8443") == 403)
        // Allowed origins, and every origin.
        let allowed = SitePolicy(bindHost: "127.0.0.1", allowedOrigins: ["http://localhost:3000/"])
        #expect(status(allowed, origin: "http://localhost:3000") == nil)
        #expect(status(allowed, origin: "http://localhost:3001") == 403)
        #expect(allowed.allowsListed(origin: "HTTP://LOCALHOST:3000") && !allowed.allowsListed(origin: "http://127.0.0.1:8080"))
        #expect(status(SitePolicy(bindHost: "127.0.0.1", allowedOrigins: ["*"]), origin: "https://evil.example") == nil)
        #expect(status(SitePolicy(bindHost: "127.0.0.1", allowedOrigins: ["https://app.example:443"]), host: "app.example", origin: "https://app.example") == nil, "the scheme's port")
    }

    @Test("a body under /v1 must be declared JSON: the plain-text and form bodies a page sends unasked are refused 415")
    func bodyTypes() {
        let policy = SitePolicy(bindHost: "127.0.0.1")
        #expect(status(policy, type: "text/plain;charset=UTF-8") == 415)
        #expect(status(policy, type: "application/x-www-form-urlencoded") == 415)
        #expect(status(policy, "PATCH", "/v1/documents/a/b", type: nil) == 415)
        #expect(status(policy, type: "Application/JSON; charset=utf-8") == nil)
        #expect(status(policy, type: "application/merge-patch+json") == nil)
        #expect(status(policy, "DELETE", "/v1/documents/a/b", type: nil) == nil)
        #expect(status(policy, "POST", "/health", type: "text/plain") == nil, "outside the API: the route answers")
        #expect(status(policy, "POST", "/v1//commit/", type: "text/plain") == 415, "spelled with empty segments, as the router reads it")
        #expect(status(policy, "PUT", "/v1/changes", type: nil) == nil, "a method the path does not take: the router's 405")
    }

    @Test("a server bound to loopback answers loopback names, allowed hosts and allowed origins' hosts only (DNS rebinding); one bound elsewhere any name")
    func hosts() {
        let local = SitePolicy(bindHost: "127.0.0.1", allowedOrigins: ["https://app.example"], allowedHosts: ["Sync.Internal"])
        for host in ["127.0.0.1:8080", "localhost", "LOCALHOST:8080", "[::1]:8080", "127.1.2.3", "sync.internal:443", "app.example"] {
            #expect(status(local, "GET", "/v1/documents/a/b", host: host, type: nil) == nil, "\(host)")
        }
        for host in ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "[::1", "localhost:port"] {
            #expect(status(local, "GET", "/v1/documents/a/b", host: host, type: nil) == 421, "\(host)")
        }
        #expect(status(local, "GET", "/health", host: nil, type: nil) == nil, "HTTP/1.0 without Host")
        #expect(status(SitePolicy(bindHost: "0.0.0.0"), "GET", "/health", host: "evil.example", type: nil) == nil)
        #expect(status(SitePolicy(bindHost: "localhost"), "GET", "/health", host: "evil.example", type: nil) == 421)
        // Open on an address others reach (0.0.0.0 in a container published on 127.0.0.1): a name
        // is a rebinding page's unless allowed; addresses and loopback names are answered.
        let exposedOpen = SitePolicy(bindHost: "0.0.0.0", open: true, allowedHosts: ["sync.lan"])
        for host in ["192.168.1.5:8080", "[fe80::1]:8080", "localhost:8080", "127.0.0.1", "sync.lan"] {
            #expect(status(exposedOpen, "GET", "/v1/documents/a/b", host: host, type: nil) == nil, "\(host)")
        }
        #expect(status(exposedOpen, "GET", "/v1/documents/a/b", host: "rebound.evil.example:8080", type: nil) == 421)
    }
}
