import Logging

/// Sends the engines' analytics events to swift-log: severe events log as errors, warnings as
/// warnings, the rest at `info`, with the parameters as metadata.
///
/// ```swift
/// let engine = CollectionSyncEngine<Product>(remote: remote, managerKey: "products",
///                                            logger: SwiftLogDataSyncLogger(Logger(label: "sync")))
/// ```
public struct SwiftLogDataSyncLogger: DataSyncLogger {
    /// The swift-log logger the events go to.
    public var logger: Logger

    /// A logger sending every event to `logger`.
    public init(_ logger: Logger) {
        self.logger = logger
    }

    /// Logs the event's name at the level its severity maps to, with its parameters as metadata.
    public func trackEvent(_ event: DataSyncLogEvent) {
        var metadata = Logger.Metadata()
        for (key, value) in event.parameters {
            metadata[key] = .string("\(value)")
        }
        let level: Logger.Level
        switch event.severity {
        case .info: level = .info
        case .warning: level = .warning
        case .severe: level = .error
        }
        logger.log(level: level, "\(event.name)", metadata: metadata)
    }

    /// Logged at `debug` as `user_properties`, with the properties as metadata.
    public func addUserProperties(dict: [String: any Sendable], isHighPriority: Bool) {
        var metadata = Logger.Metadata()
        for (key, value) in dict {
            metadata[key] = .string("\(value)")
        }
        metadata["high_priority"] = .string("\(isHighPriority)")
        logger.log(level: .debug, "user_properties", metadata: metadata)
    }
}
