/// A table of at most `capacity` values by key that, when full, makes room for a new key by
/// forgetting the least recently used one (LRU). Every operation takes constant time: a dictionary
/// finds a key's entry, and the entries form a list from the least to the most recently used,
/// linked by their indices, so an entry moves to the end, or the first one is reused, in place.
/// Pure: no locks, no clock.
///
/// ```swift
/// var buckets = LRUTable<Admission.Caller, RateLimiter>(capacity: 2)
/// buckets.update(.user("ada"), default: RateLimiter(perSecond: 10)) { $0.admit(1, at: .zero) }
/// buckets.update(.user("bob"), default: RateLimiter(perSecond: 10)) { $0.admit(1, at: .zero) }
/// buckets.update(.user("ada"), default: RateLimiter(perSecond: 10)) { $0.admit(1, at: .zero) }
/// // Full: Carol's entry takes Bob's place, the least recently used. Ada's stays.
/// buckets.update(.user("carol"), default: RateLimiter(perSecond: 10)) { $0.admit(1, at: .zero) }
/// ```
///
/// ``Admission`` keeps its callers' rate buckets in one: a crowd of new callers (one IPv6 /64
/// holds 2⁶⁴ addresses) forgets only the callers seen least lately, never every caller at once.
struct LRUTable<Key: Hashable, Value> {
    private struct Entry {
        var key: Key
        var value: Value
        /// The entry used just before this one; nil for the least recently used.
        var older: Int?
        /// The entry used just after this one; nil for the most recently used.
        var newer: Int?
    }

    /// The most entries the table keeps.
    let capacity: Int
    private var indices: [Key: Int] = [:]
    /// Never more than `capacity`: once full, an entry's slot is reused for the next new key.
    private var entries: [Entry] = []
    private var oldest: Int?
    private var newest: Int?

    /// An empty table that keeps at most `capacity` entries (at least one).
    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// How many entries the table holds.
    var count: Int { indices.count }

    /// The value kept for `key`, without counting as a use of it.
    func peek(_ key: Key) -> Value? {
        indices[key].map { entries[$0].value }
    }

    /// The keys held, from the least to the most recently used.
    var keysByRecency: [Key] {
        var keys: [Key] = []
        keys.reserveCapacity(count)
        var index = oldest
        while let current = index {
            keys.append(entries[current].key)
            index = entries[current].newer
        }
        return keys
    }

    /// Runs `body` on the value for `key` and returns its result; `key` becomes the most recently
    /// used. A key not held gets the value `make` gives, first forgetting the least recently used
    /// key when the table is full.
    mutating func update<Result>(_ key: Key, default make: @autoclosure () -> Value, _ body: (inout Value) -> Result) -> Result {
        let index: Int
        if let found = indices[key] {
            index = found
            if index != newest {
                unlink(index)
                append(index)
            }
        } else if entries.count >= capacity, let oldest {
            // Full: the least recently used entry's slot takes the new key.
            index = oldest
            unlink(index)
            indices[entries[index].key] = nil
            entries[index].key = key
            entries[index].value = make()
            indices[key] = index
            append(index)
        } else {
            index = entries.count
            entries.append(Entry(key: key, value: make()))
            indices[key] = index
            append(index)
        }
        return body(&entries[index].value)
    }

    /// Takes an entry out of the list (its slot stays in `entries`).
    private mutating func unlink(_ index: Int) {
        let older = entries[index].older
        let newer = entries[index].newer
        if let older { entries[older].newer = newer } else { oldest = newer }
        if let newer { entries[newer].older = older } else { newest = older }
        entries[index].older = nil
        entries[index].newer = nil
    }

    /// Puts an entry that is in no list at the most recently used end.
    private mutating func append(_ index: Int) {
        entries[index].older = newest
        entries[index].newer = nil
        if let newest { entries[newest].newer = index } else { oldest = index }
        newest = index
    }
}
