/// Receives the engines' analytics events, named `{managerKey}_{event}` (`user_save_start`,
/// `products_listener_retrying`…), with parameters such as `document_id`, `error_description`,
/// `pending_write_count`, `retry_count`, `delay_seconds`, `count` and `filter_count`.
///
/// ```swift
/// struct PrintLogger: DataSyncLogger {
///     func trackEvent(_ event: DataSyncLogEvent) { print(event.name, event.parameters) }
/// }
/// ```
///
/// A document engine also pushes its document's ``SyncModel/eventParameters`` as high-priority user
/// properties each time the server's copy of it arrives (a profile's name, a plan), through
/// ``addUserProperties(dict:isHighPriority:)``; loggers that keep no user properties ignore it.
public protocol DataSyncLogger: Sendable {
    /// Records one event. Called on whichever thread or task the event happens on.
    func trackEvent(_ event: DataSyncLogEvent)
    /// Properties describing the user, for analytics tools that attach them to later events.
    func addUserProperties(dict: [String: any Sendable], isHighPriority: Bool)
}

extension DataSyncLogger {
    /// Keeps no user properties.
    public func addUserProperties(dict: [String: any Sendable], isHighPriority: Bool) {}
}

/// One analytics event.
public struct DataSyncLogEvent: Sendable, CustomStringConvertible {
    /// How much the event matters: failures are `severe`.
    public enum Severity: String, Sendable, Hashable, Comparable {
        /// `info`: routine progress; `warning`: a problem the engine goes on from (a retry, a lost
        /// connection); `severe`: a failure. Ordered `info` < `warning` < `severe`.
        case info, warning, severe

        public static func < (lhs: Severity, rhs: Severity) -> Bool {
            let order: [Severity] = [.info, .warning, .severe]
            return order.firstIndex(of: lhs)! < order.firstIndex(of: rhs)!
        }
    }

    /// `{managerKey}_{event}`.
    public var name: String
    /// Details of the event, such as `document_id` or `error_description`.
    public var parameters: [String: any Sendable]
    /// How much the event matters.
    public var severity: Severity

    /// An event named `name`, by default with no parameters and `info` severity.
    public init(name: String, parameters: [String: any Sendable] = [:], severity: Severity = .info) {
        self.name = name
        self.parameters = parameters
        self.severity = severity
    }

    public var description: String {
        let rendered = parameters.keys.sorted().map { "\($0)=\(parameters[$0]!)" }.joined(separator: " ")
        return rendered.isEmpty ? name : "\(name) \(rendered)"
    }
}
