import Logging
import Synchronization

/// A swift-log handler that keeps what it is given, for tests.
struct CapturingLogHandler: LogHandler {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    final class Storage: Sendable {
        let records = Mutex<[Record]>([])
    }

    let storage = Storage()
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    var records: [Record] { storage.records.withLock { $0 } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        storage.records.withLock {
            $0.append(Record(level: event.level, message: "\(event.message)", metadata: event.metadata ?? [:]))
        }
    }
}
