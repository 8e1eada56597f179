import Foundation

/// Unbuffered output for the CLI: lines reach a pipe at once, which scripts and tests rely on.
enum Console {
    static func out(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func error(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// Whether standard output is a terminal (for progress bars).
    static var isTerminal: Bool { isatty(1) == 1 }
}
