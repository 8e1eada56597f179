import Foundation
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
    static func write(_ bytes: some Collection<UInt8>, to url: URL) throws {
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let temporary = directory.appendingPathComponent(".\(url.lastPathComponent).\(UInt32.random(in: .min ... .max)).tmp")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw failure("create", temporary) }
        var closed = false
        defer {
            if !closed { close(descriptor) }
        }
        let array = Array(bytes)
        var written = 0
        while written < array.count {
            let result = array.withUnsafeBytes { buffer in
                systemWrite(descriptor, buffer.baseAddress! + written, array.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                unlink(temporary.path)
                throw failure("write", temporary)
            }
            written += result
        }
        guard fsync(descriptor) == 0 else {
            unlink(temporary.path)
            throw failure("flush", temporary)
        }
        close(descriptor)
        closed = true
        guard rename(temporary.path, url.path) == 0 else {
            unlink(temporary.path)
            throw failure("replace", url)
        }
        let directoryDescriptor = open(directory.path, O_RDONLY)
        if directoryDescriptor >= 0 {
            _ = fsync(directoryDescriptor)
            close(directoryDescriptor)
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
