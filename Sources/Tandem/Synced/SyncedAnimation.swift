import Foundation
import TandemCore
#if canImport(SwiftUI)
import SwiftUI
#endif

/// How a synced handle shows its value's changes: inside a SwiftUI animation on Apple platforms,
/// as the configuration's `animation` says (the seed's `animation: .default`); plainly elsewhere.
struct SyncedAnimation: Sendable {
    #if canImport(SwiftUI)
    var animation: Animation?
    #endif

    static var none: SyncedAnimation { SyncedAnimation() }

    /// Runs `announce` (a handle telling its observers of `changes`): inside `withAnimation` when
    /// the value changed, an animation is set and this runs on the main thread (where
    /// ``ChangeDelivery/automatic`` delivers on Apple platforms); plainly otherwise.
    func perform(_ changes: SyncedChanges, _ announce: @escaping @Sendable () -> Void) {
        #if canImport(SwiftUI)
        if changes.contains(.value), let animation, Thread.isMainThread {
            MainActor.assumeIsolated {
                withAnimation(animation) { announce() }
            }
            return
        }
        #endif
        announce()
    }
}

extension CollectionConfiguration {
    var synced: SyncedAnimation {
        #if canImport(SwiftUI)
        SyncedAnimation(animation: animation)
        #else
        .none
        #endif
    }
}

extension DocumentConfiguration {
    var synced: SyncedAnimation {
        #if canImport(SwiftUI)
        SyncedAnimation(animation: animation)
        #else
        .none
        #endif
    }
}

#if canImport(SwiftUI)
extension CollectionConfiguration {
    /// A collection whose changes a SwiftUI view shows with `animation` (Apple platforms).
    public init(collectionPath: String, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil, animation: Animation?) {
        self.init(collectionPath: collectionPath, orderBy: orderBy, query: query, testingValue: testingValue)
        self.animation = animation
    }

    /// A collection at a path read again on each attach, whose changes a SwiftUI view shows with
    /// `animation` (Apple platforms).
    public init(collectionPath: @escaping @Sendable () -> String?, orderBy: (String, Bool)? = nil, query: Query? = nil, testingValue: [Value]? = nil,
                animation: Animation?) {
        self.init(collectionPath: collectionPath, orderBy: orderBy, query: query, testingValue: testingValue)
        self.animation = animation
    }
}

extension DocumentConfiguration {
    /// A document whose changes a SwiftUI view shows with `animation` (Apple platforms).
    public init(collectionPath: String, documentId: String, testingValue: Value? = nil, animation: Animation?) {
        self.init(collectionPath: collectionPath, documentId: documentId, testingValue: testingValue)
        self.animation = animation
    }

    /// A document in a collection read again on each attach, whose changes a SwiftUI view shows
    /// with `animation` (Apple platforms).
    public init(collectionPath: @escaping @Sendable () -> String?, documentId: String, testingValue: Value? = nil, animation: Animation?) {
        self.init(collectionPath: collectionPath, documentId: documentId, testingValue: testingValue)
        self.animation = animation
    }
}

extension SyncedQuery {
    /// A live query whose changes a SwiftUI view shows with `animation` (Apple platforms).
    public convenience init(collectionPath: @escaping @Sendable () -> String?, remote: any RemoteCollectionService,
                            persistence: (any LocalCollectionPersistence)? = nil, managerKey: String? = nil, logger: (any DataSyncLogger)? = nil,
                            changeDelivery: ChangeDelivery = .automatic, animation: Animation?, query build: (Query) -> Query = { $0 }) {
        self.init(collectionPath: collectionPath, remote: remote, persistence: persistence, managerKey: managerKey, logger: logger,
                  changeDelivery: changeDelivery, animated: SyncedAnimation(animation: animation), query: build)
    }
}
#endif
