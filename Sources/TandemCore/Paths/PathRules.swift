/// The rules every path obeys (DESIGN §2): non-empty segments without `/`, none of them `.` or
/// `..`, at most 1,500 bytes a segment, at most 100 segments.
public enum PathRules {
    /// The most bytes (UTF-8) one segment may have.
    public static let maximumSegmentBytes = 1_500
    /// The most segments a path may have.
    public static let maximumDepth = 100

    /// Splits `text` at every `/` byte. Never at `Character`s: a `/` followed by a combining mark or
    /// an emoji modifier is one `Character` with it, and a split by `Character` would keep it inside
    /// a segment.
    package static func splitAtSlashes(_ text: some StringProtocol) -> [String] {
        text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Splits and validates a slash-separated path. A single leading or trailing `/` is tolerated.
    static func segments(of path: String, kind: String) throws(TandemError) -> [String] {
        if let segments = validSegments(of: path) { return segments }
        // The path breaks a rule: the slow way finds which, and says so.
        var trimmed = Substring(path)
        if trimmed.utf8.first == UInt8(ascii: "/") { trimmed = Substring(trimmed.utf8.dropFirst()) }
        if trimmed.utf8.last == UInt8(ascii: "/") { trimmed = Substring(trimmed.utf8.dropLast()) }
        guard !trimmed.isEmpty else {
            throw TandemError.invalidArgument("The \(kind) path '\(path)' is empty; write it as collection/id[/subcollection/id…].")
        }
        let segments = splitAtSlashes(trimmed)
        try validate(segments, original: path, kind: kind)
        return segments
    }

    /// The segments of a path that breaks no rule, split over its UTF-8 bytes; nil when it breaks one.
    private static func validSegments(of path: String) -> [String]? {
        var path = path
        return path.withUTF8 { bytes -> [String]? in
            let slash = UInt8(ascii: "/")
            var start = 0
            var end = bytes.count
            if start < end, bytes[start] == slash { start += 1 }
            if start < end, bytes[end - 1] == slash { end -= 1 }
            guard start < end else { return nil }
            var segments: [String] = []
            var segmentStart = start
            for index in start...end where index == end || bytes[index] == slash {
                let length = index - segmentStart
                guard length > 0, length <= maximumSegmentBytes, segments.count < maximumDepth else { return nil }
                // "." and "..": URLs and file systems read them as this folder and its parent.
                if length <= 2, bytes[segmentStart] == UInt8(ascii: "."), bytes[index - 1] == UInt8(ascii: ".") { return nil }
                // Cut at '/' bytes, so each piece of valid UTF-8 is valid UTF-8.
                segments.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[segmentStart..<index]), as: UTF8.self))
                segmentStart = index + 1
            }
            return segments
        }
    }

    static func validate(_ segments: [String], original: String, kind: String) throws(TandemError) {
        if segments.count > maximumDepth {
            throw TandemError.invalidArgument("The \(kind) path '\(original.prefix(200))' has \(segments.count) segments; at most \(maximumDepth) are allowed.")
        }
        for (position, segment) in segments.enumerated() {
            if segment.isEmpty {
                throw TandemError.invalidArgument("The \(kind) path '\(original)' has an empty segment at position \(position + 1); remove the doubled '/'.")
            }
            if segment.utf8.contains(UInt8(ascii: "/")) {
                throw TandemError.invalidArgument("The segment '\(segment)' of the \(kind) path '\(original)' contains '/'; segments cannot contain slashes.")
            }
            if segment == "." || segment == ".." {
                throw TandemError.invalidArgument("Segment \(position + 1) of the \(kind) path '\(original.prefix(200))' is '\(segment)', which URLs and file systems read as this folder or its parent: no collection or document may be named so. Choose another id.")
            }
            if segment.utf8.count > maximumSegmentBytes {
                throw TandemError.invalidArgument("Segment \(position + 1) of the \(kind) path '\(original.prefix(200))…' is \(segment.utf8.count) bytes; at most \(maximumSegmentBytes) are allowed.")
            }
        }
    }

    /// Segment-by-segment comparison by UTF-8 bytes: the order ties in queries are broken by.
    package static func compareSegmentsForTesting(_ a: [String], _ b: [String]) -> JSONValue.Ordering { compare(a, b) }

    static func compare(_ a: [String], _ b: [String]) -> JSONValue.Ordering {
        for (x, y) in zip(a, b) {
            let order = JSONValue.compareStrings(x, y)
            if order != .equal { return order }
        }
        return a.count == b.count ? .equal : (a.count < b.count ? .less : .greater)
    }

    /// The same order as `compare` on segments, from the joined forms: bytes compared in turn with
    /// `/` taken as lower than any other byte, which is what ending a segment first means.
    /// Whether two paths are the same path: the same UTF-8 bytes, as every store keys documents.
    /// Swift's `==` on strings would call canonically equivalent spellings equal (`é` precomposed
    /// and `e` followed by U+0301; `K` and U+212A KELVIN SIGN), which are two documents on the
    /// server, and would disagree with the byte order of `compareJoined`.
    package static func sameBytes(_ a: String, _ b: String) -> Bool {
        withBytes(a) { x in withBytes(b) { y in x.count == y.count && x.elementsEqual(y) } }
    }

    /// Hashes a path's UTF-8 bytes, consistent with `sameBytes`.
    package static func hashBytes(_ text: String, into hasher: inout Hasher) {
        withBytes(text) { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Calls `body` with the string's UTF-8 bytes: in place for a native string (no copy, no
    /// retain), from a contiguous copy otherwise.
    @inline(__always)
    static func withBytes<R>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        if let result = try text.utf8.withContiguousStorageIfAvailable(body) { return result }
        var text = text
        return try text.withUTF8(body)
    }

    static func compareJoined(_ a: String, _ b: String) -> JSONValue.Ordering {
        withBytes(a) { x in
            withBytes(b) { y in
                let count = min(x.count, y.count)
                var index = 0
                while index < count {
                    let p = x[index], q = y[index]
                    if p != q {
                        let slash = UInt8(ascii: "/")
                        if p == slash { return .less }
                        if q == slash { return .greater }
                        return p < q ? .less : .greater
                    }
                    index += 1
                }
                return x.count == y.count ? .equal : (x.count < y.count ? .less : .greater)
            }
        }
    }
}
