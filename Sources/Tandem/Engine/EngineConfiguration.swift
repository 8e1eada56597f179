/// An engine's options in one value, for the engines' `init(remote:managerKey:persistence:configuration:)`:
///
/// ```swift
/// var options = EngineConfiguration()
/// options.retryPolicy = .exponential(jitter: 0.2)
/// options.changeDelivery = .mainActor
/// let todos = CollectionSyncEngine<Todo>(remote: remote, managerKey: "todos", persistence: nil, configuration: options)
/// ```
public struct EngineConfiguration: Sendable {
    /// Receives `{managerKey}_{event}` analytics events.
    public var logger: (any DataSyncLogger)?
    /// The clock retries and deadlines run on (a `ManualClock` in tests).
    public var clock: any Clock<Duration>
    /// The backoff between retries of a failed listener or outbox send (a lost connection that the
    /// remote reports is waited out instead). Default `.default`: 2, 4, 8, 16, 32, 60, 60… seconds.
    public var retryPolicy: RetryPolicy
    /// Where the retries' jitter is drawn from (seeded in tests).
    public var random: any RandomNumberGenerator & Sendable
    /// Where observers hear of changes (see ``ChangeDelivery``).
    public var changeDelivery: ChangeDelivery

    /// Options with the engines' own defaults for whatever is not given: no logger, a
    /// `ContinuousClock`, `RetryPolicy.default`, the system's random generator and `.automatic`
    /// change delivery.
    public init(logger: (any DataSyncLogger)? = nil, clock: any Clock<Duration> = ContinuousClock(), retryPolicy: RetryPolicy = .default,
                random: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator(), changeDelivery: ChangeDelivery = .automatic) {
        self.logger = logger
        self.clock = clock
        self.retryPolicy = retryPolicy
        self.random = random
        self.changeDelivery = changeDelivery
    }
}

extension CollectionSyncEngine {
    /// An engine with its options in one value.
    public convenience init(remote: any RemoteCollectionService, managerKey: String, persistence: (any LocalCollectionPersistence)?,
                            configuration: EngineConfiguration) {
        self.init(remote: remote, managerKey: managerKey, persistence: persistence, logger: configuration.logger, clock: configuration.clock,
                  retryPolicy: configuration.retryPolicy, random: configuration.random, changeDelivery: configuration.changeDelivery)
    }
}

extension DocumentSyncEngine {
    /// An engine with its options in one value.
    public convenience init(remote: any RemoteDocumentService, managerKey: String, persistence: (any LocalDocumentPersistence)?,
                            configuration: EngineConfiguration) {
        self.init(remote: remote, managerKey: managerKey, persistence: persistence, logger: configuration.logger, clock: configuration.clock,
                  retryPolicy: configuration.retryPolicy, random: configuration.random, changeDelivery: configuration.changeDelivery)
    }
}

extension CollectionGroupSyncEngine {
    /// An engine with its options in one value.
    public convenience init(remote: any RemoteCollectionGroupService, managerKey: String, persistence: (any LocalCollectionPersistence)?,
                            configuration: EngineConfiguration) {
        self.init(remote: remote, managerKey: managerKey, persistence: persistence, logger: configuration.logger, clock: configuration.clock,
                  retryPolicy: configuration.retryPolicy, random: configuration.random, changeDelivery: configuration.changeDelivery)
    }
}
