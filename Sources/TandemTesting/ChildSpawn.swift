import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A child process, started with `posix_spawn`: the part of Foundation's `Process` that the tests
/// and the testing tools use (executable, arguments, environment, working directory, standard
/// streams as pipes or the null device, a termination handler, the exit status).
///
/// Why not `Process`: on Linux its `run()` lists `/proc/self/fd` and copies each entry's whole
/// 256-byte name, which reads past the end of the directory buffer when about 1,360 descriptors
/// or more are open, and ends the process when the page after that buffer is unmapped. A test run
/// with servers and hundreds of connections at once gets there. Here the child closes every
/// descriptor from 3 up in one step (`posix_spawn_file_actions_addclosefrom_np`), without a list.
///
/// Configure it, then ``run()`` once; like `Process`, it is not for use from several threads
/// while configured.
package final class ChildSpawn: @unchecked Sendable {
    // Unchecked: the configuration is set by one caller before `run()` and read once there; the
    // exit status is behind a lock.
    package var executableURL: URL?
    package var arguments: [String] = []
    /// The child's environment; the parent's when nil.
    package var environment: [String: String]?
    package var currentDirectoryURL: URL?
    /// Each a `Pipe`, a `FileHandle` (`FileHandle.nullDevice` for nothing), or nil to share the
    /// parent's.
    package var standardInput: Any?
    package var standardOutput: Any?
    package var standardError: Any?
    /// Called once the child has exited, on a thread of its own.
    package var terminationHandler: (@Sendable (ChildSpawn) -> Void)?

    /// How the child ended.
    package enum TerminationReason: Sendable {
        case exit
        case uncaughtSignal
    }

    private struct Exit {
        var status: Int32
        var reason: TerminationReason
    }

    private let exit = Mutex<Exit?>(nil)
    private let exited = DispatchGroup()
    private let pid = Atomic<Int32>(0)

    package init() {}

    package var processIdentifier: Int32 { pid.load(ordering: .acquiring) }

    /// The exit code, or the signal that ended the child; 0 while it runs.
    package var terminationStatus: Int32 { exit.withLock { $0?.status ?? 0 } }

    package var terminationReason: TerminationReason { exit.withLock { $0?.reason ?? .exit } }

    package var isRunning: Bool { processIdentifier != 0 && exit.withLock { $0 == nil } }

    /// Blocks the calling thread until the child has exited.
    package func waitUntilExit() {
        exited.wait()
    }

    /// Starts the child. Throws when it cannot be started (no such executable, say).
    package func run() throws {
        guard let executableURL else { throw SpawnError("No executable to run.") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        // The standard streams, then nothing else of the parent's.
        try Self.redirect(standardInput, to: 0, reading: true, &actions)
        try Self.redirect(standardOutput, to: 1, reading: false, &actions)
        try Self.redirect(standardError, to: 2, reading: false, &actions)
        guard let closeFrom = Self.addCloseFrom else { throw SpawnError("posix_spawn_file_actions_addclosefrom_np is missing from the C library.") }
        try Self.check(closeFrom(&actions, 3), "close the parent's descriptors")
        if let directory = currentDirectoryURL {
            guard let chdir = Self.addChdir else { throw SpawnError("posix_spawn_file_actions_addchdir_np is missing from the C library.") }
            try Self.check(chdir(&actions, directory.path), "change to \(directory.path)")
        }
        // Signals as a fresh process has them: none blocked, each handled the default way (the
        // test process ignores SIGPIPE, say).
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in Int32(1)..<32 where signal != SIGKILL && signal != SIGSTOP { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let path = executableURL.path
        let argv = [path] + arguments
        let environment = (self.environment ?? ProcessInfo.processInfo.environment).map { "\($0)=\($1)" }
        var child: pid_t = 0
        let result = Self.withCStrings(argv) { argv in
            Self.withCStrings(environment) { envp in
                posix_spawn(&child, path, &actions, &attributes, argv, envp)
            }
        }
        guard result == 0 else { throw SpawnError("Cannot start \(path): \(String(cString: strerror(result))).") }
        pid.store(child, ordering: .releasing)
        // The child's ends are the child's now.
        Self.closeChildEnd(standardInput, reading: true)
        Self.closeChildEnd(standardOutput, reading: false)
        Self.closeChildEnd(standardError, reading: false)
        exited.enter()
        let handler = terminationHandler
        let started = child
        Thread.detachNewThread { [self] in
            var status: Int32 = 0
            while waitpid(started, &status, 0) == -1 && errno == EINTR {}
            let signal = status & 0x7f
            exit.withLock { $0 = signal == 0 ? Exit(status: (status >> 8) & 0xff, reason: .exit) : Exit(status: signal, reason: .uncaughtSignal) }
            exited.leave()
            handler?(self)
        }
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    private typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    // Looked up in the C library (glibc 2.34 and 2.29 and later), whose module here leaves them out.
    private static let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: AddCloseFrom.self) }
    private static let addChdir: AddChdir? = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map { unsafeBitCast($0, to: AddChdir.self) }

    private static func redirect(_ stream: Any?, to target: Int32, reading: Bool, _ actions: inout posix_spawn_file_actions_t) throws {
        switch stream {
        case nil:
            return
        case let pipe as Pipe:
            let handle = reading ? pipe.fileHandleForReading : pipe.fileHandleForWriting
            try check(posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target), "set up descriptor \(target)")
        case let handle as FileHandle where handle === FileHandle.nullDevice:
            try check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", reading ? O_RDONLY : O_WRONLY, 0), "open /dev/null")
        case let handle as FileHandle:
            try check(posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target), "set up descriptor \(target)")
        default:
            throw SpawnError("A standard stream is a Pipe, a FileHandle or nil, not \(type(of: stream!)).")
        }
    }

    private static func closeChildEnd(_ stream: Any?, reading: Bool) {
        guard let pipe = stream as? Pipe else { return }
        try? (reading ? pipe.fileHandleForReading : pipe.fileHandleForWriting).close()
    }

    private static func check(_ result: Int32, _ what: String) throws {
        guard result == 0 else { throw SpawnError("Cannot \(what) for a child process: \(String(cString: strerror(result))).") }
    }

    private static func withCStrings<Result>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result) -> Result {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// A child process that could not be started.
package struct SpawnError: Error, CustomStringConvertible {
    package let description: String
    init(_ description: String) { self.description = description }
}
