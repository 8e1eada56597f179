import Foundation
import TandemCore

/// Keeps a `DocumentSyncEngine`'s state on disk per manager key, the cached document and its outbox
/// always together, at the cost of one flush to disk per save, as the collection engines' SQLite.
///
/// Each save appends the whole state, with a checksum, to a journal and flushes it (one data
/// flush). Past `compactAfter` bytes the journal is folded into a snapshot file, replaced
/// atomically, and emptied. Loading takes the journal's last whole record, or the snapshot. A save
/// cut off by a crash leaves at most a torn last record, which is ignored: the state before it
/// loads. Damage anywhere else is a `data-loss` error, never a silent reset.
///
/// ```swift
/// let persistence = FileDocumentPersistence(managerKey: "user")   // ~/.local/share/tandem/user.document.json (+ .log)
/// ```
public struct FileDocumentPersistence: LocalDocumentPersistence {
    /// The snapshot file.
    public let fileURL: URL
    /// The journal appended to on every save.
    public let journalURL: URL
    /// The journal's size past which a save folds it into the snapshot. Default 256 KiB.
    public let compactAfter: Int
    private let flushes = FlushCounter()
    private let directory: URL
    private let managerKey: String

    /// - Parameters:
    ///   - managerKey: the engine's key; each key has its own files.
    ///   - directory: where to keep them; default ``LocalStorageLocation/defaultDirectory``.
    ///   - compactAfter: the journal's size, in bytes, past which a save folds it into the snapshot.
    public init(managerKey: String, directory: URL? = nil, compactAfter: Int = 256 << 10) {
        let directory = directory ?? LocalStorageLocation.defaultDirectory
        self.directory = directory
        self.managerKey = managerKey
        let name = LocalStorageLocation.fileName(for: managerKey)
        fileURL = directory.appendingPathComponent("\(name).document.json")
        journalURL = directory.appendingPathComponent("\(name).document.log")
        self.compactAfter = compactAfter
    }

    /// How many times this persistence flushed a file to disk: one per save, plus the rare fold.
    package var flushCount: Int { flushes.value }

    public func load() throws -> LocalDocumentState? {
        if let data = try AtomicFile.read(journalURL), let record = try Self.lastRecord(in: data, of: journalURL) {
            return try decode(record, from: journalURL)
        }
        guard let data = try AtomicFile.read(fileURL) else { return nil }
        return try decode(data, from: fileURL)
    }

    public func space(for user: String) throws -> any LocalDocumentPersistence {
        FileDocumentPersistence(managerKey: spaceKey(managerKey, user: user), directory: directory, compactAfter: compactAfter)
    }

    /// The file naming whose space the engine showed last.
    private var lastUserURL: URL {
        directory.appendingPathComponent("\(LocalStorageLocation.fileName(for: managerKey)).document.user")
    }

    public func lastUser() throws -> String? {
        guard let data = try AtomicFile.read(lastUserURL) else { return nil }
        let value = try JSONText.parse(bytes: data)
        return value[field: "user"]?.stringValue
    }

    public func setLastUser(_ user: String?) throws {
        let text = JSONText.encode(.object(["user": user.map { .string($0) } ?? .null]))
        try AtomicFile.write(text.utf8, to: lastUserURL)
    }

    public func save(_ state: LocalDocumentState) throws {
        let text = JSONText.encode(try JSONValueEncoder().encode(state))
        let record = Self.record(text)
        let size = try AtomicFile.append(record.utf8, to: journalURL, separator: UInt8(ascii: "\n"), flushes: flushes)
        // Never folding for every save, however large the state.
        if size > max(compactAfter, 4 * record.utf8.count) {
            // The snapshot first: a crash before the journal is emptied still loads this state
            // from the journal's last record.
            try AtomicFile.write(text.utf8, to: fileURL, flushes: flushes)
            try AtomicFile.truncate(journalURL, flushes: flushes)
        }
    }

    public func clear() throws {
        // The snapshot first: cut off between the two, the journal's newer state loads, never an
        // older one.
        for url in [fileURL, journalURL] where FileManager.default.fileExists(atPath: url.path) {
            try FileManager.default.removeItem(at: url)
        }
    }

    private func decode(_ data: some Collection<UInt8>, from url: URL) throws -> LocalDocumentState {
        do {
            let value = try JSONText.parse(bytes: Data(data))
            return try JSONValueDecoder().decode(LocalDocumentState.self, from: value)
        } catch {
            throw TandemError(.dataLoss, "The saved state in \(url.path) cannot be read; move the file away to start afresh.", cause: error)
        }
    }

    // MARK: Journal records

    /// One record: the JSON's checksum, a space, the JSON (one line: JSON text escapes newlines),
    /// and a newline.
    static func record(_ json: String) -> String {
        "\(checksum(json.utf8)) \(json)\n"
    }

    /// The JSON of the last whole record; nil when there is none. Only the last line may be torn
    /// (a save cut off by a crash); a bad line before it is data loss.
    static func lastRecord(in data: Data, of url: URL) throws -> ArraySlice<UInt8>? {
        let bytes = [UInt8](data)
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true)
        // A last line without its newline was cut off.
        if bytes.last != UInt8(ascii: "\n"), !lines.isEmpty { lines.removeLast() }
        for (index, line) in lines.enumerated().reversed() {
            if let json = valid(line) { return json }
            guard index == lines.count - 1 else { break }
        }
        guard lines.count <= 1 else {
            throw TandemError(.dataLoss, "The journal \(url.path) is damaged before its last record; move it away (and \(url.deletingPathExtension().path).json with it) to start afresh.")
        }
        return nil
    }

    private static func valid(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard line.count > 17, line[line.startIndex + 16] == UInt8(ascii: " ") else { return nil }
        let json = line[(line.startIndex + 17)...]
        let stored = String(decoding: line[line.startIndex..<(line.startIndex + 16)], as: UTF8.self)
        return stored == checksum(json) ? json : nil
    }

    /// FNV-1a, 64 bits, as 16 hex digits.
    static func checksum(_ bytes: some Sequence<UInt8>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
