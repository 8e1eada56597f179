import Foundation
import Logging

/// The device's client id, kept on disk so one installation says hello with the same id every
/// launch. It is the device half of the server's principal: an anonymous caller's writer ids
/// belong to it (a signed-in user's belong to the user, on any device).
enum ClientIdentity {
    /// The id in `directory`, made and written there the first time. A file that cannot be read
    /// or written is logged, never silent: the id then lasts for this launch only, and an
    /// anonymous outbox's writes queued under the old id are refused as another device's.
    static func load(from directory: URL, logger: Logger) -> String {
        let file = directory.appendingPathComponent("tandem-client-id")
        if FileManager.default.fileExists(atPath: file.path) {
            do {
                let id = try String(contentsOf: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
                if !id.isEmpty { return id }
            } catch {
                logger.error("the client id in \(file.path) cannot be read (\(error)); a new one is made")
            }
        }
        let id = UUID().uuidString.lowercased()
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try AtomicFile.write(Data(id.utf8), to: file)
        } catch {
            logger.error("the client id cannot be written to \(file.path) (\(error)); it lasts for this launch only. Set TandemClientConfiguration.storageDirectory to a writable folder.")
        }
        return id
    }
}
