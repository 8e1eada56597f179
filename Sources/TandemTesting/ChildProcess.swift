import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process for crash tests: one of the package's executables, run and killed with SIGKILL
/// at a chosen point of its output.
public enum ChildProcess {
    /// The executable `name` built beside the running test bundle (`swift build --build-tests`
    /// builds the package's executables there), or nil.
    public static func built(_ name: String) -> URL? {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return nil
    }

    /// Runs `executable` with `arguments`, kills it with SIGKILL as soon as it has printed
    /// `killAfter` lines, and returns the lines it printed and whether it was killed (rather than
    /// having exited first).
    public static func runAndKill(_ executable: URL, arguments: [String], afterLines killAfter: Int) async throws -> (lines: [String], killed: Bool) {
        let process = ChildSpawn()
        process.executableURL = executable
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let pid = process.processIdentifier
        let lines: [String] = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var lines: [String] = []
                var buffer = Data()
                let handle = output.fileHandleForReading
                var killed = false
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    buffer.append(chunk)
                    while let newline = buffer.firstIndex(of: 0x0A) {
                        lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                        buffer.removeSubrange(buffer.startIndex...newline)
                    }
                    if !killed && lines.count >= killAfter {
                        kill(pid, SIGKILL)
                        killed = true
                    }
                }
                // At its end: closed now, not whenever the pipe is freed.
                try? handle.close()
                continuation.resume(returning: lines)
            }
        }
        process.waitUntilExit()
        return (lines, process.terminationReason == .uncaughtSignal)
    }
}
