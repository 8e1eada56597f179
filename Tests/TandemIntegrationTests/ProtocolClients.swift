import Foundation
import Synchronization
import TandemCore
import TandemTesting

/// With `TANDEM_PROTOCOL_TRACE=1`, what the protocol clients do goes to stderr, to follow a seed.
func trace(_ message: @autoclosure () -> String) {
    guard ProcessInfo.processInfo.environment["TANDEM_PROTOCOL_TRACE"] != nil else { return }
    FileHandle.standardError.write(Data("trace: \(message())\n".utf8))
}

/// The way to the server: clients connect through it, waiting while the server is down instead
/// of spinning. Each start of the server is an epoch; a restart closes every connection of the
/// old one, including one made to the old server while it was stopping, as a real restart does.
final class ServerGate: Sendable {
    private struct State {
        var port: Int?
        var epoch = 0
        var waiters: [CheckedContinuation<(Int, Int)?, Never>] = []
        var open: [ObjectIdentifier: RawStream] = [:]
        var shut = false
    }
    private let state = Mutex(State())

    func open(port: Int) {
        let (waiters, epoch) = state.withLock { state in
            state.port = port
            defer { state.waiters = [] }
            return (state.waiters, state.epoch)
        }
        waiters.forEach { $0.resume(returning: (port, epoch)) }
    }

    /// Closes the gate for a restart and every connection through it.
    func close() async {
        let streams = state.withLock { state in
            state.port = nil
            state.epoch += 1
            defer { state.open = [:] }
            return Array(state.open.values)
        }
        for stream in streams { await stream.close() }
    }

    /// Ends the run: every connection closes and no client connects again.
    func shut() async {
        let waiters = state.withLock { state in
            state.shut = true
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(returning: nil) }
        await close()
    }

    /// A connection to the server as it is now, once it is up; nil once the run is shut.
    func connect() async -> RawStream? {
        while true {
            let next = await withCheckedContinuation { (continuation: CheckedContinuation<(Int, Int)?, Never>) in
                let now = state.withLock { state -> (Int, Int)?? in
                    if state.shut { return .some(nil) }
                    if let port = state.port { return (port, state.epoch) }
                    state.waiters.append(continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
            guard let (port, epoch) = next else { return nil }
            let stream = RawStream(port: port)
            let current = state.withLock { state -> Bool in
                guard state.epoch == epoch else { return false }
                state.open[ObjectIdentifier(stream)] = stream
                return true
            }
            if current { return stream }
            await stream.close()
        }
    }

    /// A connection the client closed itself.
    func release(_ stream: RawStream) {
        _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(stream)) }
    }
}

/// Counts answered writes across clients, so the run can restart the server at chosen points.
final class Progress: Sendable {
    private struct State {
        var count = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())

    func add(_ amount: Int) {
        let ready = state.withLock { state in
            state.count += amount
            let count = state.count
            let ready = state.waiters.filter { $0.count <= count }
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        ready.forEach { $0.continuation.resume() }
    }

    var count: Int { state.withLock { $0.count } }

    /// Returns once `count` writes were answered.
    func wait(for count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// A writer speaking the protocol from its documentation alone: it pipelines its write requests,
/// sends again from the first one refused for a passing reason, and after a dropped connection
/// resends every request not answered yet, in order, with the same mutation ids.
struct ProtocolWriter: Sendable {
    struct Request: Sendable {
        var mutations: [Mutation]
        /// The counters it increments, by how much, if it applies.
        var increments: [String: Int]
    }

    let clientID: String
    let requests: [Request]
    let window: Int
    let dropChance: Double

    /// What the server answered for each mutation id; every answer for one id must agree.
    final class Answers: Sendable {
        let state = Mutex<[MutationID: WriteAcknowledgement]>([:])
        let conflicts = Mutex<[String]>([])

        func record(_ answer: WriteAcknowledgement) {
            guard let id = answer.id else { return }
            state.withLock { answers in
                if let first = answers[id] {
                    let agree = first.isApplied == answer.isApplied && (!answer.isApplied || first.version == answer.version)
                        && (answer.status != .refused || first.error?.code == answer.error?.code)
                    if !agree { conflicts.withLock { $0.append("\(id): first \(first), then \(answer)") } }
                } else {
                    answers[id] = answer
                }
            }
        }
    }

    /// Runs until every request is answered for good.
    func run(gate: ServerGate, answers: Answers, progress: Progress, seed: UInt64) async {
        var random = SeededRandomNumberGenerator(seed: seed)
        var answered = [Bool](repeating: false, count: requests.count)
        var attempt = 0
        while answered.contains(false) {
            guard let stream = await gate.connect() else { return }
            defer { gate.release(stream) }
            trace("\(clientID) connects; \(answered.filter { $0 }.count) of \(requests.count) answered")
            guard await stream.hello(clientID) else {
                trace("\(clientID) got no welcome")
                await stream.close()
                continue
            }
            // Each send carries a new message id; an answer names the attempt it answers.
            var attempts: [Int: Int] = [:]
            var current: [Int: Int] = [:]
            var next = answered.firstIndex(of: false) ?? requests.count
            var inFlight = 0
            func send(_ index: Int) {
                attempt += 1
                attempts[attempt] = index
                current[index] = attempt
                inFlight += 1
                trace("\(clientID) sends \(attempt): \(requests[index].mutations.compactMap { $0.id?.description })")
                stream.send(.write(id: attempt, mutations: requests[index].mutations))
            }
            var dropped = false
            while !dropped, answered.contains(false) {
                while inFlight < window, next < requests.count {
                    if !answered[next] { send(next) }
                    next += 1
                }
                trace("\(clientID) waits with \(inFlight) in flight")
                if Double.random(in: 0..<1, using: &random) < dropChance / 4 {
                    // Dropped with writes in flight: their answers are lost.
                    dropped = true
                    break
                }
                guard let message = await stream.next() else {
                    dropped = true
                    break
                }
                switch message {
                case .ack(let id, let results):
                    trace("\(clientID) ack \(id): \(results.map(\.status.rawValue))")
                    guard let index = attempts.removeValue(forKey: id) else { break }
                    inFlight -= 1
                    results.forEach(answers.record)
                    if !answered[index] {
                        answered[index] = true
                        progress.add(1)
                    }
                case .error(let id?, let error):
                    trace("\(clientID) error \(id): \(error.code)")
                    guard let index = attempts.removeValue(forKey: id) else { break }
                    inFlight -= 1
                    guard !answered[index] else { break }
                    if error.code == .unavailable || error.code == .aborted {
                        // Not applied, nor anything sent after it: send again from here, in order.
                        if current[index] == id { next = min(next, index) }
                    } else {
                        for mutation in requests[index].mutations {
                            answers.record(.refused(mutation.id, error, at: .zero))
                        }
                        answered[index] = true
                        progress.add(1)
                    }
                default:
                    break
                }
                if Double.random(in: 0..<1, using: &random) < dropChance {
                    dropped = true
                }
            }
            await stream.close()
        }
    }
}

/// A listener speaking the protocol: it keeps the documents of one collection from its batches,
/// resumes from the last version it saw after every drop, and records what it was sent.
final class ProtocolListener: Sendable {
    struct State {
        var documents: [DocumentPath: Document] = [:]
        /// The version of each batch applied, in the order applied.
        var versions: [Version] = []
        var problems: [String] = []
        /// Each document's version as last seen (nil after a removal); a version seen twice for
        /// a document is a change delivered twice.
        var seen: [DocumentPath: Version] = [:]
        var waiters: [(version: Version, continuation: CheckedContinuation<Void, Never>)] = []
    }

    let collection: CollectionPath
    let state = Mutex(State())
    private let stop = Mutex(false)
    /// The connection open now, closed by `finish()`.
    private let current = Mutex<RawStream?>(nil)

    init(collection: CollectionPath) {
        self.collection = collection
    }

    var version: Version { state.withLock { $0.versions.last ?? .zero } }

    /// Stops listening: the run returns once its connection is closed.
    func finish() async {
        stop.withLock { $0 = true }
        await current.withLock { $0 }?.close()
    }

    /// Returns once a batch at `version` or later was applied.
    func wait(for version: Version) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if (state.versions.last ?? .zero) >= version { return true }
                state.waiters.append((version, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    func run(gate: ServerGate, seed: UInt64, dropChance: Double) async {
        var random = SeededRandomNumberGenerator(seed: seed)
        while !stop.withLock({ $0 }) {
            guard let stream = await gate.connect() else { return }
            defer { gate.release(stream) }
            trace("listener \(seed) connects at \(state.withLock { $0.versions.last ?? .zero })")
            current.withLock { $0 = stream }

            if stop.withLock({ $0 }) {
                await stream.close()
                break
            }
            guard await stream.hello("listener-\(seed)") else {
                await stream.close()
                continue
            }
            let resume = state.withLock { $0.versions.last }
            stream.send(.listen(id: 1, target: .collection(collection, Query()), resumeFrom: resume))
            var partial: [RemoteChange] = []
            while !stop.withLock({ $0 }), let message = await stream.next() {
                guard case .batch(1, let batch, let reset, let more) = message else { continue }
                partial += batch.changes
                if more { continue }
                apply(RemoteChangeBatch(isSnapshot: batch.isSnapshot, changes: partial, version: batch.version), reset: reset)
                partial = []
                if Double.random(in: 0..<1, using: &random) < dropChance { break }
            }
            await stream.close()
        }
    }

    private func apply(_ batch: RemoteChangeBatch, reset: Bool) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if let last = state.versions.last, batch.version < last || (batch.version == last && !batch.changes.isEmpty) {
                state.problems.append("batch \(batch.version) after \(last)")
            }
            if batch.isSnapshot {
                state.documents = [:]
            }
            for change in batch.changes {
                if let seen = state.seen[change.path], change.version <= seen, !batch.isSnapshot {
                    state.problems.append("\(change.path) at version \(change.version) after \(seen)")
                }
                state.seen[change.path] = change.version
                state.documents[change.path] = change.document
            }
            state.versions.append(batch.version)
            let ready = state.waiters.filter { $0.version <= batch.version }.map(\.continuation)
            state.waiters.removeAll { $0.version <= batch.version }
            return ready
        }
        ready.forEach { $0.resume() }
    }
}
