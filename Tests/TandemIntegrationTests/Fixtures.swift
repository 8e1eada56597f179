import Foundation
import Synchronization
import Logging
import Tandem
import TandemCore
import TandemTesting

struct Note: SyncModel, Equatable {
    var id: String
    var text: String
    var n: Int = 0
}

/// A temporary directory removed when the test is done with it.
final class TemporaryDirectory: Sendable {
    let url: URL
    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-it-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }
}

/// A client of a live server, running in the background until `stop()`.
final class RunningClient: Sendable {
    let client: TandemClient
    private let task: Task<Void, any Error>

    convenience init(_ server: LiveServer, id: String, configure: (inout TandemClientConfiguration) -> Void = { _ in }) {
        self.init(url: server.url, id: id, configure: configure)
    }

    init(url: URL, id: String, configure: (inout TandemClientConfiguration) -> Void = { _ in }) {
        var configuration = TandemClientConfiguration()
        configuration.clientID = id
        configuration.logger.logLevel = .critical
        configure(&configuration)
        let client = TandemClient(url: url, configuration: configuration)
        self.client = client
        task = Task { try await client.run() }
    }

    func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}


func documentPath(_ text: String) -> DocumentPath { try! DocumentPath(text) }
func collectionPath(_ text: String) -> CollectionPath { try! CollectionPath(text) }

