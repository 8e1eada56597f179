import Foundation
import Synchronization
import TandemCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Replaces a file's contents atomically and durably: write a temporary file beside it, flush it to
/// disk, rename it over the old one, then flush the directory. A crash at any point leaves either
/// the old contents or the new.
enum AtomicFile {
    static func write(_ bytes: some Collection<UInt8>, to url: URL, flushes: FlushCounter? = nil) throws {
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let temporary = directory.appendingPathComponent(".\(url.lastPathComponent).\(UInt32.random(in: .min ... .max)).tmp")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw failure("create", temporary) }
        var closed = false
        defer {
            if !closed { close(descriptor) }
        }
        do {
            try writeAll(Array(bytes), to: descriptor, temporary)
        } catch {
            unlink(temporary.path)
            throw error
        }
        guard fsync(descriptor) == 0 else {
            unlink(temporary.path)
            throw failure("flush", temporary)
        }
        flushes?.add()
        close(descriptor)
        closed = true
        guard rename(temporary.path, url.path) == 0 else {
            unlink(temporary.path)
            throw failure("replace", url)
        }
        flushDirectory(directory, flushes)
    }

    /// Appends bytes to a file (made if missing) and flushes its data to disk: one flush, plus one
    /// of the directory when the file is new. Returns the file's size after the append. Counts its
    /// flushes in `flushes`.
    @discardableResult
    /// With `separator`, a file whose last byte is not it (a torn tail) gets one before `bytes`.
    static func append(_ bytes: some Collection<UInt8>, to url: URL, separator: UInt8? = nil, flushes: FlushCounter) throws -> Int {
        let directory = url.deletingLastPathComponent()
        let isNew = !FileManager.default.fileExists(atPath: url.path)
        if isNew { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
        let descriptor = open(url.path, O_RDWR | O_CREAT | O_APPEND, 0o600)
        guard descriptor >= 0 else { throw failure("open", url) }
        defer { close(descriptor) }
        var bytes = Array(bytes)
        if let separator, !endsWith(separator, descriptor) {
            // A write cut off by a crash left a torn tail: what follows starts on its own line.
            bytes.insert(separator, at: 0)
        }
        try writeAll(bytes, to: descriptor, url)
        guard flushData(descriptor) == 0 else { throw failure("flush", url) }
        flushes.add()
        if isNew { flushDirectory(directory, flushes) }
        let end = lseek(descriptor, 0, SEEK_END)
        return end < 0 ? 0 : Int(end)
    }

    /// Whether the file is empty or its last byte is `byte`.
    private static func endsWith(_ byte: UInt8, _ descriptor: Int32) -> Bool {
        let size = lseek(descriptor, 0, SEEK_END)
        guard size > 0 else { return true }
        var last: UInt8 = 0
        return pread(descriptor, &last, 1, size - 1) == 1 && last == byte
    }

    /// Empties a file, durably (nothing when it does not exist).
    static func truncate(_ url: URL, flushes: FlushCounter) throws {
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        let descriptor = open(url.path, O_WRONLY | O_TRUNC)
        guard descriptor >= 0 else { throw failure("empty", url) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("flush", url) }
        flushes.add()
    }

    private static func writeAll(_ array: [UInt8], to descriptor: Int32, _ url: URL) throws {
        var written = 0
        while written < array.count {
            let result = array.withUnsafeBytes { buffer in
                systemWrite(descriptor, buffer.baseAddress! + written, array.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw failure("write", url)
            }
            written += result
        }
    }

    /// Flushes a file's data (and the size that makes it readable), not its other metadata.
    private static func flushData(_ descriptor: Int32) -> Int32 {
        #if canImport(Darwin)
        return fsync(descriptor)
        #else
        return fdatasync(descriptor)
        #endif
    }

    private static func flushDirectory(_ directory: URL, _ flushes: FlushCounter?) {
        let descriptor = open(directory.path, O_RDONLY)
        if descriptor >= 0 {
            _ = fsync(descriptor)
            close(descriptor)
            flushes?.add()
        }
    }

    /// The file's bytes, or nil when it does not exist.
    static func read(_ url: URL) throws -> Data? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try Data(contentsOf: url)
    }

    private static func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
        #if canImport(Glibc)
        return Glibc.write(descriptor, buffer, count)
        #elseif canImport(Musl)
        return Musl.write(descriptor, buffer, count)
        #else
        return Darwin.write(descriptor, buffer, count)
        #endif
    }

    private static func failure(_ action: String, _ url: URL) -> TandemError {
        let reason = String(cString: strerror(errno))
        return TandemError(.dataLoss, "Could not \(action) \(url.path): \(reason). Check that the directory exists and is writable.")
    }
}

/// How many times files were flushed to disk: what a persistence's tests count.
final class FlushCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
