extension CompiledQuery {
    /// The most disjunctions a query's filters may make in disjunctive normal form (an `or` of
    /// `and`s of field filters), Firestore's limit: `a == 1 && (b == 1 || c == 1)` makes two.
    /// `in`, `not-in` and `array-contains-any` count as one filter each.
    public static let maximumDisjunctions = 30

    /// How many conjunctions `predicate` makes in disjunctive normal form: an `or`'s filters add
    /// up, an `and` multiplies them. Counted up to `cap` (any more count as `cap`), so however
    /// deeply a filter nests, the count neither overflows nor goes on past the cap.
    static func disjunctionCount(_ predicate: Predicate, cap: Int) -> Int {
        switch predicate {
        case .field:
            return 1
        case .or(let branches):
            var count = 0
            for predicate in branches {
                count = min(cap, count + disjunctionCount(predicate, cap: cap))
                if count == cap { return cap }
            }
            return count
        case .and(let all):
            var count = 1
            for predicate in all {
                // Both factors are at most `cap`: the product fits.
                count = min(cap, count * disjunctionCount(predicate, cap: cap))
                if count == cap { return cap }
            }
            return count
        }
    }

    /// The query's filters in disjunctive normal form: a document passes the filters exactly when
    /// it passes every field filter of at least one term. One empty term when there are no
    /// filters. At most ``maximumDisjunctions`` terms, which the query was validated to make.
    ///
    /// What reasons about a query's documents from its filters (the access rules' proof that a
    /// query reads only what it may) reads this, so an `or` is taken apart in one place.
    package var disjunctiveTerms: [[FieldFilter]] {
        Self.terms(of: .and(filters))
    }

    private static func terms(of predicate: Predicate) -> [[FieldFilter]] {
        switch predicate {
        case .field(let filter):
            return [[filter]]
        case .or(let branches):
            return branches.flatMap { terms(of: $0) }
        case .and(let all):
            // Every term of the first filter with every term of the next, and so on. Each filter
            // has at least one term, so the partial products never exceed the final count.
            var result: [[FieldFilter]] = [[]]
            for predicate in all {
                let next = terms(of: predicate)
                result = result.flatMap { left in next.map { left + $0 } }
            }
            return result
        }
    }
}
