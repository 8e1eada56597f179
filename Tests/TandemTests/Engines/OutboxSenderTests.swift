import Foundation
import Observation
import Synchronization
import Testing
import TandemCore
import TandemTesting
@testable import Tandem

/// The outbox sender's rules, as a pure state machine: events in (the outbox, answers, the time),
/// actions out. Times are elapsed durations on an engine's clock.
@Suite("Outbox sender")
struct OutboxSenderTests {
    typealias Sender = OutboxSender<String>

    /// An outbox of `singles` independent writes, then a batch of `batch` writes, then `after` more singles.
    func outbox(singles: Int, batch: Int = 0, after: Int = 0) throws -> Outbox {
        var outbox = Outbox(clientID: "c")
        for index in 0..<singles { _ = outbox.enqueue(.set(try DocumentPath("items/s\(index)"), ["n": .int(index)])) }
        if batch > 0 {
            _ = outbox.enqueue(batch: try (0..<batch).map { .set(try DocumentPath("items/b\($0)"), ["n": .int($0)]) })
        }
        for index in 0..<after { _ = outbox.enqueue(.set(try DocumentPath("items/a\(index)"), ["n": .int(index)])) }
        return outbox
    }

    func sent(_ action: Sender.Action) -> [Sender.Request] {
        guard case .send(let window) = action else { return [] }
        return window
    }

    /// The outbox after the server acknowledged `requests`.
    func acknowledged(_ requests: [Sender.Request], in outbox: Outbox) -> Outbox {
        var outbox = outbox
        for request in requests {
            for entry in request.entries { outbox.remove(entry.id) }
        }
        return outbox
    }

    func acknowledgements(_ request: Sender.Request, version: UInt64 = 7) -> Result<[WriteAcknowledgement], any Error> {
        .success(request.entries.map { WriteAcknowledgement(id: $0.id, version: Version(version), document: nil) })
    }

    @Test("requests are bounded by bytes as well as by count: large writes go a few to a request, one over the bound alone, and a batch whole")
    func windowsByBytes() throws {
        var outbox = Outbox(clientID: "c")
        let large = JSONValue.string(String(repeating: "x", count: 100_000))
        for index in 0..<7 { _ = outbox.enqueue(.set(try DocumentPath("items/l\(index)"), ["text": large])) }
        _ = outbox.enqueue(.set(try DocumentPath("items/huge"), ["text": .string(String(repeating: "y", count: 400_000))]))
        _ = outbox.enqueue(batch: try (0..<3).map { .set(try DocumentPath("items/b\($0)"), ["text": large]) })
        var limits = Sender.Limits(writesPerRequest: 500, requestsInFlight: 10)
        limits.bytesPerRequest = 250_000
        var sender = Sender(limits: limits, policy: .default)
        let window = sent(sender.wake(outbox: outbox))
        #expect(window.map(\.entries.count) == [2, 2, 2, 1, 1, 3], "\(window.map(\.entries.count))")
        #expect(window.dropLast().allSatisfy { request in request.entries.count == 1 || request.entries.reduce(0) { $0 + $1.mutation.estimatedWireBytes } <= 250_000 })
        // The estimate is never below the bytes the request takes as JSON.
        for request in window {
            let encoded = request.entries.reduce(0) { $0 + JSONText.encode($1.mutation.wireValue).utf8.count }
            #expect(request.entries.reduce(0) { $0 + $1.mutation.estimatedWireBytes } >= encoded)
        }
    }

    @Test("a window packs independent writes into requests decided one by one, a batch into its own atomic request, at most the limit in flight")
    func windows() throws {
        var sender = Sender(limits: .init(writesPerRequest: 3, requestsInFlight: 3), policy: .default)
        let window = sent(sender.wake(outbox: try outbox(singles: 4, batch: 2, after: 5)))
        #expect(window.map(\.entries.count) == [3, 1, 2])
        #expect(window.map(\.isAtomic) == [false, true, true])
        #expect(window[2].entries.allSatisfy { $0.batch != nil })
        #expect(window.allSatisfy { $0.entries.allSatisfy { $0.attempts == 1 } })
        #expect(window[0].writeRequest == WriteRequest(window[0].entries.map(\.mutation), isAtomic: false))
        #expect(sender.phase == .sending)
        // While a window is in flight, a wake sends nothing more.
        #expect(sender.wake(outbox: try outbox(singles: 4, batch: 2, after: 5)) == .none)
    }

    @Test("held (signed out), nothing is sent, not on a wake, a backoff's end or a reconnection; waiters are let go; released, the window goes")
    func held() throws {
        var sender = Sender(limits: .init(writesPerRequest: 10, requestsInFlight: 1), policy: .default)
        let queue = try outbox(singles: 2)
        sender.isHeld = true
        sender.wait(for: queue.entries[0].id, "first")
        #expect(sender.wake(outbox: queue) == .none)
        #expect(sender.resumed(outbox: queue) == .none)
        #expect(sender.releaseWaitersIfHeld() == ["first"])
        #expect(sender.waiterCount == 0)
        sender.isHeld = false
        #expect(sender.releaseWaitersIfHeld() == [])
        #expect(sent(sender.resumed(outbox: queue)).map(\.entries.count) == [2])
        // Held while a window is in flight: its answer settles, and nothing follows it.
        sender.isHeld = true
        _ = sender.answered([.failure(TandemError(.unavailable, "the connection went"))])
        #expect(sender.proceed(outbox: queue, now: .seconds(1), random: 0.5) == .none)
        #expect(sender.phase == .idle)
    }

    @Test("answers decide each write and tell its waiters; the next window follows until the outbox is empty")
    func answersAndWaiters() throws {
        var sender = Sender(limits: .init(writesPerRequest: 2, requestsInFlight: 1), policy: .default)
        var queue = try outbox(singles: 3)
        let ids = queue.entries.map(\.id)
        sender.wait(for: ids[0], "first")
        sender.wait(for: ids[2], "third")
        sender.wait(for: ids[2], "third again")
        let first = sent(sender.wake(outbox: queue))
        #expect(first.map(\.entries.count) == [2])
        let settlement = sender.answered([acknowledgements(first[0])])
        #expect(settlement.decisions.map(\.entry.id) == Array(ids[0..<2]))
        #expect(settlement.resumed.map(\.0) == ["first"])
        #expect(settlement.failure == nil)
        queue = acknowledged(first, in: queue)
        let second = sent(sender.proceed(outbox: queue, now: .zero, random: 0.5))
        #expect(second.map { $0.entries.map(\.id) } == [[ids[2]]])
        let last = sender.answered([acknowledgements(second[0])])
        #expect(last.resumed.map(\.0) == ["third", "third again"])
        #expect(sender.proceed(outbox: acknowledged(second, in: queue), now: .zero, random: 0.5) == .none)
        #expect(sender.phase == .idle)
        #expect(sender.waiterCount == 0)
    }

    @Test("a failure that may pass keeps every write queued, tells every waiter so, and sleeps out the policy's delay with its jitter; then one write probes")
    func backoffAndProbe() throws {
        let policy = RetryPolicy.exponential(initial: .seconds(2), maximum: .seconds(60), jitter: 0.5)
        var sender = Sender(limits: .init(writesPerRequest: 10, requestsInFlight: 2), policy: policy)
        let queue = try outbox(singles: 5)
        sender.wait(for: queue.entries.last!.id, "late")
        let window = sent(sender.wake(outbox: queue))
        let settlement = sender.answered([.failure(TandemError(.unavailable, "offline"))])
        #expect(settlement.decisions.isEmpty)
        #expect(settlement.resumed.count == 1)
        if case .queued = settlement.resumed.first?.1 {} else { Issue.record("the waiter was not told the write stays queued") }
        #expect(settlement.failure != nil)
        #expect(sender.failures == 1)
        // random 0.75 with jitter 0.5: 2 s × (1 + 0.5 × 0.5) = 2.5 s after now.
        let action = sender.proceed(outbox: queue, now: .seconds(10), random: 0.75)
        #expect(action == .sleep(until: .seconds(12.5)))
        #expect(sender.phase == .waiting(until: .seconds(12.5)))
        #expect(window.count == 1)
        // Early or late timers: only the deadline counts.
        #expect(sender.retryDue(outbox: queue, now: .seconds(12)) == .none)
        let probe = sent(sender.retryDue(outbox: queue, now: .seconds(12.5)))
        #expect(probe.map(\.entries.count) == [1])
        _ = sender.answered([acknowledgements(probe[0])])
        #expect(sender.failures == 0)
        let full = sent(sender.proceed(outbox: acknowledged(probe, in: queue), now: .seconds(13), random: 0.5))
        #expect(full.map(\.entries.count) == [4])
    }

    @Test("a write hears at once that it stays queued only when nothing can answer it: signed out, or down with an attempt failed on it; while a connection is made, it waits")
    func answersQueuedAtOnce() throws {
        var sender = Sender(limits: .init(writesPerRequest: 10, requestsInFlight: 1), policy: .default)
        let queue = try outbox(singles: 2)
        #expect(!sender.answersQueuedAtOnce)
        _ = sender.disconnected()
        #expect(!sender.answersQueuedAtOnce, "down, and nothing failed on it yet: a connection may be on its way")
        _ = sent(sender.wake(outbox: queue))
        _ = sender.answered([.failure(TandemError(.unavailable, "offline"))])
        #expect(sender.proceed(outbox: queue, now: .seconds(1), random: 0.5) == .none)
        #expect(sender.answersQueuedAtOnce)
        // The next attempt still goes (a write wakes the connection), and a write queued meanwhile is not held for it.
        _ = sent(sender.wake(outbox: queue))
        #expect(sender.answersQueuedAtOnce)
        _ = sender.resumed(outbox: queue)
        #expect(!sender.answersQueuedAtOnce, "back: the next answer decides")
        sender.isHeld = true
        #expect(sender.answersQueuedAtOnce)
    }

    @Test("with the connection down a failed window waits for it instead of backing off, a backoff under way ends, and its return sends at once")
    func followsTheConnection() throws {
        var sender = Sender(limits: .init(writesPerRequest: 10, requestsInFlight: 2), policy: .default)
        let queue = try outbox(singles: 3)
        _ = sender.wake(outbox: queue)
        // The window fails before the connection's event comes: a backoff starts, and the event ends it.
        _ = sender.answered([.failure(TandemError(.unavailable, "lost"))])
        #expect(sender.proceed(outbox: queue, now: .seconds(1), random: 0.5) == .sleep(until: .seconds(3)))
        let endedBackoff = sender.disconnected()
        #expect(endedBackoff)
        #expect(sender.phase == .idle && sender.isOffline)
        // Down with an attempt failed on it, a write sends nothing (its caller hears it is
        // queued): the shell asks the connection to try now, and its return sends.
        #expect(sender.restsUntilResumed && sender.answersQueuedAtOnce)
        #expect(sender.wake(outbox: queue) == .none)
        #expect(sender.phase == .idle)
        let endedAgain = sender.disconnected()
        #expect(!endedAgain, "no backoff to end")
        // Back: the probe goes at once, then full windows.
        let probe = sent(sender.resumed(outbox: queue))
        #expect(probe.map(\.entries.count) == [1] && !sender.isOffline && !sender.restsUntilResumed)
        _ = sender.answered([acknowledgements(probe[0])])
        #expect(sent(sender.proceed(outbox: acknowledged(probe, in: queue), now: .seconds(3), random: 0.5)).map(\.entries.count) == [2])
        // A drop and a return while that window is in flight: if it fails, it goes again at once.
        _ = sender.disconnected()
        #expect(!sender.restsUntilResumed, "nothing failed on this connection yet")
        #expect(sender.resumed(outbox: queue) == .none)
        _ = sender.answered([.failure(TandemError(.unavailable, "failed on the old connection"))])
        #expect(sent(sender.proceed(outbox: queue, now: .seconds(5), random: 0.5)).count == 1)
    }

    @Test("a write during a backoff sends at once; the delays grow with each failure in a row")
    func wakeDuringBackoff() throws {
        var sender = Sender(limits: .init(), policy: .default)
        let queue = try outbox(singles: 2)
        _ = sender.wake(outbox: queue)
        _ = sender.answered([.failure(TandemError(.unavailable, "offline"))])
        #expect(sender.proceed(outbox: queue, now: .zero, random: 0.5) == .sleep(until: .seconds(2)))
        let probe = sent(sender.wake(outbox: queue))
        #expect(probe.map(\.entries.count) == [1])
        _ = sender.answered([.failure(TandemError(.unavailable, "offline"))])
        #expect(sender.proceed(outbox: queue, now: .seconds(1), random: 0.5) == .sleep(until: .seconds(5)))
        // The old deadline is stale.
        #expect(sender.retryDue(outbox: queue, now: .seconds(2)) == .none)
    }

    @Test("a reconnection while a window is in flight sends again at once if it fails")
    func reconnectDuringSend() throws {
        var sender = Sender(limits: .init(), policy: .default)
        let queue = try outbox(singles: 3)
        _ = sender.wake(outbox: queue)
        #expect(sender.wake(outbox: queue, reconnected: true) == .none)
        _ = sender.answered([.failure(TandemError(.unavailable, "connection lost"))])
        #expect(sent(sender.proceed(outbox: queue, now: .zero, random: 0.5)).map(\.entries.count) == [1])
        // Once used, the mark is gone: the next failure backs off.
        _ = sender.answered([.failure(TandemError(.unavailable, "connection lost"))])
        if case .sleep = sender.proceed(outbox: queue, now: .zero, random: 0.5) {} else { Issue.record("expected a backoff") }
    }

    @Test("a request refused whole rejects each of its writes; a write refused inside a request decided one by one takes no other with it")
    func rejections() throws {
        var sender = Sender(limits: .init(writesPerRequest: 3, requestsInFlight: 2), policy: .default)
        let queue = try outbox(singles: 3, batch: 2)
        let ids = queue.entries.map(\.id)
        sender.wait(for: ids[1], "middle")
        sender.wait(for: ids[3], "batch")
        let window = sent(sender.wake(outbox: queue))
        #expect(window.map(\.entries.count) == [3, 2])
        let refused = TandemError(.notFound, "no such document")
        var answer = window[0].entries.map { WriteAcknowledgement(id: $0.id, version: 4, document: nil) }
        answer[1] = .refused(ids[1], refused, at: 4)
        let settlement = sender.answered([.success(answer), .failure(TandemError(.failedPrecondition, "the batch's precondition"))])
        let rejected = settlement.decisions.filter { if case .rejected = $0.decision { return true } else { return false } }.map(\.entry.id)
        #expect(rejected == [ids[1], ids[3], ids[4]])
        #expect(settlement.decisions.count == 5)
        #expect(settlement.failure == nil)
        let outcomes = Dictionary(uniqueKeysWithValues: settlement.resumed.map { ($0.0, $0.1) })
        if case .rejected(let error) = outcomes["middle"] { #expect(error.code == .notFound) } else { Issue.record("middle not rejected") }
        if case .rejected(let error) = outcomes["batch"] { #expect(error.code == .failedPrecondition) } else { Issue.record("batch not rejected") }
    }

    @Test("a write the answer leaves out is decided unknown, never assumed applied or deleted")
    func missingAcknowledgement() throws {
        var sender = Sender(limits: .init(), policy: .default)
        let queue = try outbox(singles: 2)
        let window = sent(sender.wake(outbox: queue))
        let only = WriteAcknowledgement(id: queue.entries.first!.id, version: 9, document: nil)
        let settlement = sender.answered([.success([only])])
        #expect(settlement.decisions.count == 2)
        #expect(settlement.decisions[1].decision == .acknowledged(WriteAcknowledgement(id: window[0].entries[1].id, status: .unknown, version: 9)))
    }

    @Test("a policy that gives up leaves the writes queued until the next wake")
    func givingUp() throws {
        var sender = Sender(limits: .init(), policy: .none)
        let queue = try outbox(singles: 1)
        _ = sender.wake(outbox: queue)
        _ = sender.answered([.failure(TandemError(.unavailable, "offline"))])
        #expect(sender.proceed(outbox: queue, now: .zero, random: 0.5) == .none)
        #expect(sender.phase == .idle)
        #expect(sent(sender.wake(outbox: queue)).count == 1)
    }

    @Test("a waiter taken back hears nothing")
    func stopWaiting() throws {
        var sender = Sender(limits: .init(), policy: .default)
        let queue = try outbox(singles: 1)
        let id = queue.entries.first!.id
        sender.wait(for: id, "a")
        sender.wait(for: id, "b")
        #expect(sender.stopWaiting(for: id) == "b")
        let window = sent(sender.wake(outbox: queue))
        #expect(sender.answered([acknowledgements(window[0])]).resumed.map(\.0) == ["a"])
    }
}

/// A remote whose server no longer knows the answer to any write (`unknown`), and whose document
/// reads return what the server holds.
final class ForgetfulRemote: RemoteCollectionService {
    let held: Document?
    let reads = Mutex(0)

    init(held: Document?) { self.held = held }

    func collectionPath() throws -> CollectionPath { try CollectionPath("products") }
    func getDocuments(query: Query) async throws -> [Document] { held.map { [$0] } ?? [] }
    func getDocument(id: String) async throws -> Document? {
        reads.withLock { $0 += 1 }
        return held
    }
    func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> { AsyncThrowingStream { _ in } }
    func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> { AsyncThrowingStream { _ in } }
    func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] {
        mutations.map { WriteAcknowledgement(id: $0.id, status: .unknown, version: 9) }
    }
}

@Suite("Outbox sender in an engine")
struct OutboxSenderEngineTests {
    @Test("a write answered unknown makes the engine read the document again, and show the server's state, never a deletion", .timeLimit(.minutes(5)))
    func unknownRefetches() async throws {
        let held = Document(path: try DocumentPath("products/lamp"), data: ["name": "Server lamp", "price": 31, "stock": 2], version: 7)
        let remote = ForgetfulRemote(held: held)
        let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "forgetful", persistence: nil, clock: ManualClock())
        let (changes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        var iterator = changes.makeAsyncIterator()
        func shown() -> String? {
            withObservationTracking { engine.getDocument(id: "lamp")?.name } onChange: { continuation.yield() }
        }
        try await engine.saveDocument(Product(id: "lamp", name: "Local lamp", price: 30, stock: 3))
        #expect(!engine.hasPendingWrites)
        // The tracking is installed once the read returns: read again after it, lest a change in
        // between go unseen.
        while shown() != "Server lamp" && engine.getDocument(id: "lamp")?.name != "Server lamp" {
            _ = await iterator.next()
        }
        #expect(remote.reads.withLock { $0 } == 1)
        #expect(engine.getDocument(id: "lamp")?.stock == 2)
    }
}

/// A remote that answers no write request at all.
struct SilentRemote: RemoteCollectionService {
    func collectionPath() throws -> CollectionPath { try CollectionPath("products") }
    func getDocuments(query: Query) async throws -> [Document] { [] }
    func getDocument(id: String) async throws -> Document? { nil }
    func listen(query: Query, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> { AsyncThrowingStream { _ in } }
    func listenDocument(id: String, resumeFrom: Version?) -> AsyncThrowingStream<RemoteChangeBatch, any Error> { AsyncThrowingStream { _ in } }
    func commit(_ mutations: [Mutation]) async throws -> [WriteAcknowledgement] { [] }
    func commit(requests: [WriteRequest]) async -> [Result<[WriteAcknowledgement], any Error>] { [] }
}

extension OutboxSenderEngineTests {
    @Test("a remote that answers another number of requests than it was sent keeps every write queued, and says so")
    func wrongNumberOfAnswers() async throws {
        let logger = RecordingDataSyncLogger()
        let engine = CollectionSyncEngine<Product>(remote: SilentRemote(), managerKey: "silent", persistence: nil, logger: logger, clock: ManualClock())
        try await engine.saveDocument(Product(id: "lamp", name: "Lamp", price: 30, stock: 3))
        #expect(engine.pendingWrites.count == 1)
        #expect(engine.getDocument(id: "lamp")?.name == "Lamp")
        #expect(logger.names.contains("silent_syncPendingWrites_badAnswer"))
    }
}
