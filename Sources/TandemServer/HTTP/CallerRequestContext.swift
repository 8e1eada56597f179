import Hummingbird
import NIOCore

/// Each HTTP request's context: the framework's, and the address the request came from, which an
/// anonymous caller's quotas count against in ``Admission`` (it has no user to count them by).
struct CallerRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
