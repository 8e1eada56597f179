import Observation

/// An engine that is `Observable` by hand, through a registrar of its own, rather than with the
/// macro: its hot reads can then be `@inlinable`, specialized for the app's model type in the app's
/// module, and still tell observers what they read.
@usableFromInline
protocol RegistrarObservable: Observable, AnyObject {
    var registrar: ObservationRegistrar { get }
}

extension RegistrarObservable {
    @inlinable
    func access<Member>(keyPath: KeyPath<Self, Member>) {
        registrar.access(self, keyPath: keyPath)
    }

    func withMutation<Member, Result>(keyPath: KeyPath<Self, Member>, _ mutation: () throws -> Result) rethrows -> Result {
        try registrar.withMutation(of: self, keyPath: keyPath, mutation)
    }
}
