import Crypto
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SwiftASN1
import Testing
import X509
import Tandem
import TandemCore
import TandemServer
import TandemTesting

/// A certificate authority, and a certificate for 127.0.0.1 it signed, made by the test and
/// written as PEM files.
struct TestCertificates {
    let directory = TemporaryDirectory()
    let authorityFile: String
    let certificateFile: String
    let keyFile: String

    init() throws {
        let now = Date()
        let authorityKey = P256.Signing.PrivateKey()
        let authorityName = try DistinguishedName { CommonName("Tandem test authority") }
        let authority = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(authorityKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(3600),
            issuer: authorityName, subject: authorityName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil)) },
            issuerPrivateKey: .init(authorityKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(serverKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(3600),
            issuer: authorityName, subject: try DistinguishedName { CommonName("127.0.0.1") }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])), .dnsName("localhost")])
            },
            issuerPrivateKey: .init(authorityKey))
        authorityFile = directory.url.appendingPathComponent("authority.pem").path
        certificateFile = directory.url.appendingPathComponent("server.pem").path
        keyFile = directory.url.appendingPathComponent("server-key.pem").path
        try authority.serializeAsPEM().pemString.write(toFile: authorityFile, atomically: true, encoding: .utf8)
        try server.serializeAsPEM().pemString.write(toFile: certificateFile, atomically: true, encoding: .utf8)
        try serverKey.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
    }

    /// A client configuration that trusts the test's authority alone.
    func trusting() throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(authorityFile))
        return tls
    }
}

@Suite("TLS", .timeLimit(.minutes(5)))
struct TLSTests {
    /// One HTTP/1.1 request over TLS, answered whole (the server closes after it).
    func https(port: Int, _ request: String, tls: TLSConfiguration) async throws -> String {
        let context = try NIOSSLContext(configuration: tls)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(60))   // a hang guard: a loaded machine can take seconds to accept
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: nil))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: request))
            var text = ""
            do {
                for try await var buffer in inbound {
                    text += buffer.readString(length: buffer.readableBytes) ?? ""
                    if text.contains("\r\n\r\n"), text.hasSuffix("}") { break }
                }
            } catch {
                // The server may end the TLS session without a close_notify once it has answered.
            }
            return text
        }
    }

    @Test("a server with a certificate serves HTTPS and WSS: a client trusting its authority syncs, one trusting only the system's roots cannot connect, and a bad key file is a clear error")
    func tls() async throws {
        let certificates = try TestCertificates()
        var configuration = SyncServerConfiguration()
        configuration.tls = try SyncServerConfiguration.tls(certificateFile: certificates.certificateFile, keyFile: certificates.keyFile)
        let server = try await LiveServer.start(configuration: configuration)
        #expect(server.url.scheme == "https")

        // HTTPS: the health check and a write, through the TLS handshake.
        let health = try await https(port: server.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", tls: try certificates.trusting())
        #expect(health.hasPrefix("HTTP/1.1 200"))
        let body = #"{"text":"over https"}"#
        let put = try await https(port: server.port, "PUT /v1/documents/notes/tls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)",
                                  tls: try certificates.trusting())
        #expect(put.hasPrefix("HTTP/1.1 200"))

        // WSS: a TandemClient given the authority as its trust root. TLS names the server by host
        // name (an IP address cannot be sent as the server name), so the client uses localhost.
        let url = URL(string: "https://localhost:\(server.port)")!
        let trusted = RunningClient(url: url, id: "trusting") { $0.tlsConfiguration = try? certificates.trusting() }
        await trusted.client.waitUntilConnected()
        #expect(trusted.client.isConnected)
        #expect(try await trusted.client.document(at: documentPath("notes/tls"))?.data["text"] == "over https")
        _ = try await trusted.client.commit([.set(documentPath("notes/wss"), ["text": "over wss"])])
        #expect(try await server.store.document(at: documentPath("notes/wss"))?.data["text"] == "over wss")

        // Trusting only the system's roots, the handshake fails: the client gives up after one attempt.
        let untrusting = RunningClient(url: url, id: "untrusting") { $0.reconnectPolicy = RetryPolicy(initial: .zero, maximum: .zero, maximumAttempts: 0) }
        await untrusting.client.waitUntilConnected()
        #expect(!untrusting.client.isConnected && untrusting.client.connectionAttempts == 1)
        #expect(try await server.store.currentVersion() == 2)

        #expect(throws: TandemError.self) { try SyncServerConfiguration.tls(certificateFile: certificates.certificateFile, keyFile: certificates.certificateFile) }
        #expect(throws: TandemError.self) { try SyncServerConfiguration.tls(certificateFile: certificates.keyFile, keyFile: certificates.keyFile) }
        await untrusting.stop()
        await trusted.stop()
        await server.stop()
    }
}
