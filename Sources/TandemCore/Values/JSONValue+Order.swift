extension JSONValue {
    /// The rank of a value's type in the total order: null < bool < number < string < array < object.
    /// Ints and doubles share one rank, so they compare as numbers.
    public var typeOrder: Int {
        switch self {
        case .null: return 0
        case .bool: return 1
        case .int, .double: return 2
        case .string: return 3
        case .array: return 4
        case .object: return 5
        }
    }

    /// Compares two values in the total order of queries: by type first, then by value.
    ///
    /// Numbers compare exactly across int and double; NaN sorts below every other number and equals
    /// itself. Strings compare by their UTF-8 bytes; arrays element by element; objects by their
    /// sorted keys, then values.
    public static func compare(_ lhs: JSONValue, _ rhs: JSONValue) -> Ordering {
        switch (lhs, rhs) {
        case (.null, .null): return .equal
        case (.bool(let a), .bool(let b)): return a == b ? .equal : (!a ? .less : .greater)
        case (.int(let a), .int(let b)): return a == b ? .equal : (a < b ? .less : .greater)
        case (.double(let a), .double(let b)): return compareDoubles(a, b)
        case (.int(let a), .double(let b)): return compareIntToDouble(a, b)
        case (.double(let a), .int(let b)): return compareIntToDouble(b, a).reversed
        case (.string(let a), .string(let b)): return compareStrings(a, b)
        case (.array(let a), .array(let b)):
            for (x, y) in zip(a, b) {
                let order = compare(x, y)
                if order != .equal { return order }
            }
            return a.count == b.count ? .equal : (a.count < b.count ? .less : .greater)
        case (.object(let a), .object(let b)):
            let keysA = a.keys.sorted(by: { compareStrings($0, $1) == .less })
            let keysB = b.keys.sorted(by: { compareStrings($0, $1) == .less })
            for (ka, kb) in zip(keysA, keysB) {
                let keyOrder = compareStrings(ka, kb)
                if keyOrder != .equal { return keyOrder }
                let valueOrder = compare(a[ka]!, b[kb]!)
                if valueOrder != .equal { return valueOrder }
            }
            return keysA.count == keysB.count ? .equal : (keysA.count < keysB.count ? .less : .greater)
        default:
            return lhs.typeOrder < rhs.typeOrder ? .less : .greater
        }
    }

    /// Whether two values are the same value written the same way: the same types (an int and a
    /// double differ), strings with the same UTF-8 bytes, arrays and objects element by element.
    /// `==` calls two spellings of a string that Unicode counts as one (`é` precomposed and
    /// decomposed) equal, though a store keeps each as it was written; a diff that must see every
    /// edit uses this. Object keys are matched as a dictionary matches them.
    package static func identical(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)):
            return PathRules.sameBytes(a, b)
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { identical($0, $1) }
        case (.object(let a), .object(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { identical(value, $0) } ?? false }
        default:
            return lhs == rhs
        }
    }

    /// Whether two values are equal in the order of queries (`1 == 1.0`).
    public static func queryEquals(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        compare(lhs, rhs) == .equal
    }

    /// The result of comparing two values.
    public enum Ordering: Sendable, Hashable {
        /// `less`: the first value sorts before the second; `equal`: they sort together; `greater`:
        /// the first sorts after the second.
        case less, equal, greater

        var reversed: Ordering {
            switch self {
            case .less: return .greater
            case .equal: return .equal
            case .greater: return .less
            }
        }
    }

    /// By UTF-8 bytes alone: one total order. (Swift's `==` calls canonically equivalent strings
    /// equal, "K" and the Kelvin sign among them, while their bytes order them apart from a third:
    /// the order would not be transitive, and a sort or a limit would depend on its input's order.)
    static func compareStrings(_ a: String, _ b: String) -> Ordering {
        var ia = a.utf8.makeIterator()
        var ib = b.utf8.makeIterator()
        while true {
            switch (ia.next(), ib.next()) {
            case (nil, nil): return .equal
            case (nil, _): return .less
            case (_, nil): return .greater
            case (let x?, let y?):
                if x != y { return x < y ? .less : .greater }
            }
        }
    }

    static func compareDoubles(_ a: Double, _ b: Double) -> Ordering {
        switch (a.isNaN, b.isNaN) {
        case (true, true): return .equal
        case (true, false): return .less
        case (false, true): return .greater
        case (false, false): return a == b ? .equal : (a < b ? .less : .greater)
        }
    }

    /// Exact comparison of an int with a double, without the rounding of `Double(int)`.
    static func compareIntToDouble(_ int: Int, _ double: Double) -> Ordering {
        if double.isNaN { return .greater }
        // 2^63 is exactly representable; every Int is below it and at or above -2^63.
        if double >= 9_223_372_036_854_775_808.0 { return .less }
        if double < -9_223_372_036_854_775_808.0 { return .greater }
        let whole = double.rounded(.down)
        let wholeInt = Int(whole)
        if int != wholeInt { return int < wholeInt ? .less : .greater }
        return whole == double ? .equal : .less
    }
}
