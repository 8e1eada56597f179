import Foundation
import TandemTesting
import Synchronization

/// The `tandem` executable, built beside the tests, run as a child process.
enum CLIProcess {
    struct Result {
        var status: Int32
        var out: String
        var err: String
        var lines: [String] { out.split(separator: "\n").map(String.init) }
    }

    static var executable: URL? {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("tandem")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return nil
    }

    /// Runs `tandem ARGS…` to completion.
    static func run(_ arguments: [String], input: String? = nil) async throws -> Result {
        let process = ChildSpawn()
        process.executableURL = executable
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let collectedOut = Collector(out.fileHandleForReading)
        let collectedErr = Collector(err.fileHandleForReading)
        let exited = Exit()
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        let stdin = input.map { _ in Pipe() }
        if let stdin { process.standardInput = stdin }
        try process.run()
        if let stdin, let input {
            // Written from a thread of its own: a pipe takes 64 KiB before the writer waits for
            // the reader.
            let writer = stdin.fileHandleForWriting
            Thread.detachNewThread {
                writer.write(Data(input.utf8))
                try? writer.close()
            }
        }
        let status = await exited.wait()
        return Result(status: status, out: await collectedOut.text(), err: await collectedErr.text())
    }
}

extension CLIProcess {
    /// Runs `tandem ARGS…` to completion with its standard output on a pseudo-terminal, as in a
    /// user's shell, and returns what it wrote there.
    static func runOnTerminal(_ arguments: [String]) async throws -> (status: Int32, out: String) {
        // Linux's pseudo-terminal multiplexer: unlock a new terminal and ask for its number
        // (TIOCSPTLCK and TIOCGPTN).
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        var unlock: CInt = 0
        var number: CUnsignedInt = 0
        guard master >= 0, ioctl(master, UInt(0x4004_5431), &unlock) == 0, ioctl(master, UInt(0x8004_5430), &number) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "no pseudo-terminal: errno \(errno)"])
        }
        let terminal = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
        guard terminal >= 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "cannot open the terminal: errno \(errno)"]) }
        let process = ChildSpawn()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = FileHandle(fileDescriptor: terminal, closeOnDealloc: false)
        process.standardError = FileHandle.nullDevice
        let exited = Exit()
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        try process.run()
        close(terminal)
        // Read until the terminal's last writer is gone (read then fails with EIO).
        let output = await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8], Never>) in
            Thread.detachNewThread {
                var bytes: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
                    if count <= 0 { break }
                    bytes += buffer[0..<count]
                }
                close(master)
                continuation.resume(returning: bytes)
            }
        }
        return (await exited.wait(), String(decoding: output, as: UTF8.self))
    }
}

/// A running `tandem` process whose standard output is read line by line.
final class RunningProcess: Sendable {
    let process: ChildSpawn
    private let lines: Lines
    private let exited = Exit()

    /// Runs `tandem` with `arguments`; with `errorsToo`, what it writes to standard error comes
    /// in the same lines, in the order written.
    init(_ arguments: [String], errorsToo: Bool = false) throws {
        let process = ChildSpawn()
        process.executableURL = CLIProcess.executable
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = errorsToo ? out : FileHandle.nullDevice
        lines = Lines(out.fileHandleForReading)
        let exited = self.exited
        process.terminationHandler = { exited.fire($0.terminationStatus) }
        try process.run()
        self.process = process
    }

    /// The next line printed, or nil once output ends.
    func nextLine() async -> String? { await lines.next() }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    func waitForExit() async -> Int32 { await exited.wait() }
}

/// Reads a pipe to its end on a background queue.
final class Collector: Sendable {
    private let data = Mutex(Data())
    private let done = Exit()

    init(_ handle: FileHandle) {
        DispatchQueue.global().async {
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                self.data.withLock { $0.append(chunk) }
            }
            // At its end: closed now, not whenever the pipe is freed.
            try? handle.close()
            self.done.fire(0)
        }
    }

    func text() async -> String {
        _ = await done.wait()
        return String(decoding: data.withLock { $0 }, as: UTF8.self)
    }
}

/// Splits a pipe into lines as they arrive.
final class Lines: Sendable {
    private struct State {
        var queue: [String] = []
        var ended = false
        var waiter: CheckedContinuation<String?, Never>?
    }
    private let state = Mutex(State())

    init(_ handle: FileHandle) {
        DispatchQueue.global().async {
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    self.put(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                    buffer.removeSubrange(buffer.startIndex...newline)
                }
            }
            try? handle.close()
            self.put(nil)
        }
    }

    private func put(_ line: String?) {
        let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
            if let line { state.queue.append(line) } else { state.ended = true }
            guard let waiter = state.waiter else { return nil }
            state.waiter = nil
            return waiter
        }
        guard let waiter else { return }
        let next = state.withLock { state -> String? in state.queue.isEmpty ? nil : state.queue.removeFirst() }
        waiter.resume(returning: next)
    }

    func next() async -> String? {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> String?? in
                if !state.queue.isEmpty { return .some(state.queue.removeFirst()) }
                if state.ended { return .some(nil) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// A one-shot exit status that can be awaited.
final class Exit: Sendable {
    private let state = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))

    func fire(_ status: Int32) {
        let waiters = state.withLock { state -> [CheckedContinuation<Int32, Never>] in
            guard state.status == nil else { return [] }
            state.status = status
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(returning: status) }
    }

    func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = state.withLock { state -> Int32? in
                if let status = state.status { return status }
                state.waiters.append(continuation)
                return nil
            }
            if let status { continuation.resume(returning: status) }
        }
    }
}
