extension Duration {
    /// The duration in seconds, as a double.
    package var doubleSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded up (a wait is never shortened), clamped to `Int`.
    package var wholeMilliseconds: Int {
        let milliseconds = (doubleSeconds * 1000).rounded(.up)
        return milliseconds >= Double(Int.max) ? Int.max : max(0, Int(milliseconds))
    }
}
