import Synchronization
import Tandem

/// A `DataSyncLogger` that keeps every event, for tests to assert on.
public final class RecordingDataSyncLogger: DataSyncLogger {
    private let recorded = Locked<[DataSyncLogEvent]>([])

    /// A logger with nothing recorded yet.
    public init() {}

    /// Records `event` after every event before it, and wakes whoever waits for its name.
    public func trackEvent(_ event: DataSyncLogEvent) {
        recorded.withLock { $0.append(event) }
    }

    /// Every event so far, in order.
    public var events: [DataSyncLogEvent] { recorded.value }

    /// The names of the events so far.
    public var names: [String] { events.map(\.name) }

    /// The events with this name.
    public func events(named name: String) -> [DataSyncLogEvent] { events.filter { $0.name == name } }

    /// Returns true once an event with this name was recorded (at once if one was); false if the
    /// test's time limit cancels the wait first.
    @discardableResult
    public func wait(forEventNamed name: String) async -> Bool {
        await recorded.wait { $0.contains { $0.name == name } }
    }

    /// Every `addUserProperties` call so far, in order.
    public var userProperties: [(dict: [String: any Sendable], isHighPriority: Bool)] { properties.withLock { $0 } }
    private let properties = Mutex<[(dict: [String: any Sendable], isHighPriority: Bool)]>([])

    public func addUserProperties(dict: [String: any Sendable], isHighPriority: Bool) {
        properties.withLock { $0.append((dict, isHighPriority)) }
    }
}
