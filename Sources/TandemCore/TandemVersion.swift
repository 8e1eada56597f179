/// The version of this Tandem build, as `tandem --version` prints it.
public enum TandemVersion {
    /// The build's version, such as `0.1.0`; a server also reports it in `welcome` and `GET /health`.
    public static let current = "0.1.0"
    /// The version of the wire protocol spoken by clients and servers of this build.
    ///
    /// Protocol 2 answers every mutation of a write with its status (`applied`, `replayed`,
    /// `refused` with its error, or `unknown`), where protocol 1 answered a refusal with an error
    /// frame and a forgotten answer as if the write had deleted its document. Protocol 3 adds writes
    /// whose mutations are decided one by one (`"atomic": false`), so a client can send many
    /// independent queued writes in one request.
    public static let wireProtocol = 3
    /// The oldest protocol a server of this build still speaks (`docs/PROTOCOL.md` says how the two
    /// differ).
    public static let oldestWireProtocol = 1
}
