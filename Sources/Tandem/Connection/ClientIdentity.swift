import Foundation

/// The client id kept on disk, so one installation says hello with the same id every launch.
enum ClientIdentity {
    static func load(from directory: URL) -> String {
        let file = directory.appendingPathComponent("tandem-client-id")
        if let text = try? String(contentsOf: file, encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if !id.isEmpty { return id }
        }
        let id = UUID().uuidString.lowercased()
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try? AtomicFile.write(Data(id.utf8), to: file)
        return id
    }
}
