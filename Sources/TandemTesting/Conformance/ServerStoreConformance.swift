import Foundation
import Synchronization
import TandemCore
import TandemServer

/// The checks every `ServerStore` must pass: the contract written on the protocol, run as code.
/// Each check takes a fresh store from a ``Subject`` and throws a ``ConformanceFailure`` saying what
/// broke. Run them from your tests, one test case per check:
///
/// ```swift
/// @Test(arguments: ServerStoreConformance.checks)
/// func conformance(_ check: ServerStoreConformance.Check) async throws {
///     try await check.run(on: .init(name: "mine") {
///         let store = try MyStore.openFresh()
///         return .init(store: store) { try MyStore.reopen(store) }   // the same data, as after a restart
///     })
/// }
/// ```
public enum ServerStoreConformance {
    /// The store under test.
    public struct Subject: Sendable {
        /// The store's name, to tell subjects apart in a test's output.
        public var name: String
        /// Opens a store over new, empty data.
        public var open: @Sendable () async throws -> OpenedStore

        /// A subject named `name` whose `open` gives a store over new, empty data at each call.
        public init(name: String, open: @escaping @Sendable () async throws -> OpenedStore) {
            self.name = name
            self.open = open
        }
    }

    /// A store under test and how to open it again over the same data, as after a restart (a
    /// store that keeps nothing across restarts may return itself).
    public struct OpenedStore: Sendable {
        /// The store, over new, empty data.
        public var store: any ServerStore
        /// Opens a store over `store`'s data, as after a restart; the checks that restart call it
        /// and go on with what it returns.
        public var reopen: @Sendable () async throws -> any ServerStore
        /// Opens another instance over the same data while `store` stays open, as another server
        /// node does (``sharedChecks``); nil for a store one process owns.
        public var openShared: (@Sendable () async throws -> any ServerStore)?

        /// A store under test, how to reopen it, and, for a store several nodes share, how to open
        /// another instance beside it.
        public init(store: any ServerStore, reopen: @escaping @Sendable () async throws -> any ServerStore,
                    openShared: (@Sendable () async throws -> any ServerStore)? = nil) {
            self.store = store
            self.reopen = reopen
            self.openShared = openShared
        }

        /// Another instance over the same data (``openShared``).
        func shared() async throws -> any ServerStore {
            guard let openShared else {
                throw ConformanceFailure(message: "this check needs a second instance over the same data: give the subject openShared", file: #fileID, line: #line)
            }
            return try await openShared()
        }
    }

    /// One named check.
    public struct Check: Sendable, CustomStringConvertible {
        /// What the check expects of a store, in a sentence; also its `description`.
        public let name: String
        let body: @Sendable (OpenedStore) async throws -> Void

        init(_ name: String, _ body: @escaping @Sendable (OpenedStore) async throws -> Void) {
            self.name = name
            self.body = body
        }

        public var description: String { name }

        /// Runs the check on a fresh store of `subject`.
        public func run(on subject: Subject) async throws {
            try await body(try await subject.open())
        }
    }

    /// Every check, writes first.
    public static var checks: [Check] { writeChecks + exactlyOnceChecks + readChecks }
}

/// What a conformance check found broken.
public struct ConformanceFailure: Error, CustomStringConvertible {
    /// What broke: what was expected, and what the store did.
    public var message: String
    /// The file of the check that failed, as `#fileID` names it.
    public var file: String
    /// The line of the check that failed.
    public var line: Int

    public var description: String { "\(file):\(line): \(message)" }
}


// MARK: Assertions

func expect(_ condition: Bool, _ message: @autoclosure () -> String, file: String = #fileID, line: Int = #line) throws {
    if !condition { throw ConformanceFailure(message: message(), file: file, line: line) }
}

func expectEqual<T: Equatable>(_ actual: T, _ expected: T, _ what: @autoclosure () -> String, file: String = #fileID, line: Int = #line) throws {
    if actual != expected {
        throw ConformanceFailure(message: "\(what()): expected \(expected), got \(actual)", file: file, line: line)
    }
}

/// Runs `body` and expects it to throw a ``TandemError`` with `code`; returns the error.
@discardableResult
func expectError(_ code: TandemError.Code, _ what: @autoclosure () -> String, file: String = #fileID, line: Int = #line, _ body: () async throws -> Void) async throws -> TandemError {
    do {
        try await body()
    } catch let error as TandemError {
        try expect(error.code == code, "\(what()): expected \(code), got \(error)", file: file, line: line)
        return error
    } catch {
        throw ConformanceFailure(message: "\(what()): expected \(code), got \(error)", file: file, line: line)
    }
    throw ConformanceFailure(message: "\(what()): expected \(code), but it succeeded", file: file, line: line)
}

func path(_ text: String) -> DocumentPath { try! DocumentPath(text) }
func collection(_ text: String) -> CollectionPath { try! CollectionPath(text) }

func id(_ client: String, _ sequence: UInt64) -> MutationID { MutationID(clientID: client, sequence: sequence) }

let increment = Mutation.update(path("counters/a"), fields: [:], transforms: [.init("n", .increment(1))])

extension ServerStore {
    /// Commits requests in one call with default limits, each answer as a result.
    func commitAll(_ requests: [[Mutation]]) async -> [Result<CommitResult, TandemError>] {
        await commit(requests, limits: ServerLimits(), clientID: nil)
    }

    /// The counter documents' `n`, or nil.
    func counter(_ text: String = "counters/a") async throws -> JSONValue? {
        try await document(at: path(text))?.data["n"]
    }
}
