extension Duration {
    /// The duration in seconds, as a double.
    package var doubleSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
