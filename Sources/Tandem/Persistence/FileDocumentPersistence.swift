import Foundation
import TandemCore

/// Keeps a `DocumentSyncEngine`'s state in one JSON file per manager key, replaced atomically and
/// flushed to disk on every save, so the cached document and its outbox always change together.
///
/// ```swift
/// let persistence = FileDocumentPersistence(managerKey: "user")   // ~/.local/share/tandem/user.document.json
/// ```
public struct FileDocumentPersistence: LocalDocumentPersistence {
    /// The file holding the state.
    public let fileURL: URL

    /// - Parameters:
    ///   - managerKey: the engine's key; each key has its own file.
    ///   - directory: where to keep it; default ``LocalStorageLocation/defaultDirectory``.
    public init(managerKey: String, directory: URL? = nil) {
        let directory = directory ?? LocalStorageLocation.defaultDirectory
        fileURL = directory.appendingPathComponent("\(LocalStorageLocation.fileName(for: managerKey)).document.json")
    }

    public func load() throws -> LocalDocumentState? {
        guard let data = try AtomicFile.read(fileURL) else { return nil }
        do {
            let value = try JSONText.parse(bytes: data)
            return try JSONValueDecoder().decode(LocalDocumentState.self, from: value)
        } catch {
            throw TandemError(.dataLoss, "The saved state in \(fileURL.path) cannot be read; move the file away to start afresh.", cause: error)
        }
    }

    public func save(_ state: LocalDocumentState) throws {
        let text = JSONText.encode(try JSONValueEncoder().encode(state))
        try AtomicFile.write(text.utf8, to: fileURL)
    }

    public func clear() throws {
        if FileManager.default.fileExists(atPath: fileURL.path) {
            try FileManager.default.removeItem(at: fileURL)
        }
    }
}
