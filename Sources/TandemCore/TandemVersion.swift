/// The version of this Tandem build, as `tandem --version` prints it.
public enum TandemVersion {
    public static let current = "0.1.0"
    /// The version of the wire protocol spoken by clients and servers of this build.
    public static let wireProtocol = 1
}
