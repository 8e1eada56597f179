/// A random number generator that gives the same numbers for the same seed (SplitMix64), so a
/// test that draws its choices from it replays exactly from the seed a failure names.
///
/// ```swift
/// var random = SeededRandomNumberGenerator(seed: 42)
/// let delay = policy.delay(afterFailures: 3, using: &random)
/// ```
public struct SeededRandomNumberGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose numbers follow from `seed` alone: the same seed, the same numbers.
    public init(seed: UInt64) {
        state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var bits = state
        bits = (bits ^ (bits >> 30)) &* 0xbf58_476d_1ce4_e5b9
        bits = (bits ^ (bits >> 27)) &* 0x94d0_49bb_1331_11eb
        return bits ^ (bits >> 31)
    }
}
