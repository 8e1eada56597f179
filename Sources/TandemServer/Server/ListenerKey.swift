/// A listener: the session it belongs to and the id of the `listen` request that started it.
struct ListenerKey: Hashable, Sendable {
    var session: Int
    var target: Int
}
