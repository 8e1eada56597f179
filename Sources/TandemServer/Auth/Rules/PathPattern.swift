import TandemCore

/// The documents a rule covers: `rooms/{room}/messages/{message}`, or a prefix and everything
/// below it, `users/{uid}/{rest=**}` (which covers `users/ada` itself as well).
struct PathPattern: Sendable, CustomStringConvertible {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case capture(String)
        /// Zero or more segments; last only.
        case rest(String)
    }

    let segments: [Segment]
    let description: String
    /// The captures' names, in order: a condition refers to them by index.
    let captureNames: [String]

    private var fixedCount: Int { hasRest ? segments.count - 1 : segments.count }
    private var hasRest: Bool { if case .rest = segments.last { true } else { false } }

    init(segments: [Segment], description: String) {
        self.segments = segments
        self.description = description
        captureNames = segments.compactMap { segment in
            switch segment {
            case .literal: nil
            case .capture(let name), .rest(let name): name
            }
        }
    }

    /// Parses a pattern; the error's offset is in Unicode scalars from the pattern's start.
    init(parsing text: String) throws(RuleSyntaxError) {
        description = text
        var segments: [Segment] = []
        var names: [String] = []
        var offset = 0
        let parts = PathRules.splitAtSlashes(text)
        for (index, part) in parts.enumerated() {
            defer { offset += part.unicodeScalars.count + 1 }
            if part.isEmpty {
                throw RuleSyntaxError(offset: offset, message: "a pattern's segments must not be empty (no leading, trailing or double `/`)")
            }
            guard part.first == "{" else {
                if part.contains("{") || part.contains("}") {
                    throw RuleSyntaxError(offset: offset, message: "`\(part)` mixes braces into a segment: a capture is a whole segment, `{name}`")
                }
                segments.append(.literal(String(part)))
                continue
            }
            guard part.last == "}", part.count >= 3 else {
                throw RuleSyntaxError(offset: offset, message: "expected a capture, `{name}` or `{name=**}`, found `\(part)`")
            }
            var inner = part.dropFirst().dropLast()
            var isRest = false
            if inner.hasSuffix("=**") {
                inner = inner.dropLast(3)
                isRest = true
            }
            let name = String(inner)
            guard Self.isName(name) else {
                throw RuleSyntaxError(offset: offset + 1, message: "`\(name)` is not a capture name: use letters, digits and `_`, starting with a letter")
            }
            if ["auth", "resource", "request", "true", "false", "null"].contains(name) {
                throw RuleSyntaxError(offset: offset + 1, message: "`\(name)` is a name conditions use already; call the capture something else")
            }
            if names.contains(name) {
                throw RuleSyntaxError(offset: offset + 1, message: "the pattern captures `\(name)` twice")
            }
            if isRest && index != parts.count - 1 {
                throw RuleSyntaxError(offset: offset, message: "`{\(name)=**}` must be the pattern's last segment")
            }
            names.append(name)
            segments.append(isRest ? .rest(name) : .capture(name))
        }
        self.segments = segments
        self.captureNames = names
        if !hasRest && segments.count % 2 != 0 {
            throw RuleSyntaxError(offset: 0, message: "the pattern names a collection (it has \(segments.count) segments): a rule covers documents, so give it an even number of segments, or end it with `{rest=**}`")
        }
    }

    /// The names conditions can say: ASCII letters, digits and `_`, not starting with a digit.
    private static func isName(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || ("a"..."z").contains(first) || ("A"..."Z").contains(first) else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) }
    }

    // MARK: Matching one document

    /// The captures' values if the pattern covers the document at `path`, else nil.
    func match(_ path: [String]) -> [String?]? {
        if hasRest ? path.count < fixedCount : path.count != segments.count { return nil }
        // The literals first, so a pattern that does not match allocates nothing.
        for (index, segment) in segments.enumerated() {
            if case .literal(let literal) = segment, !PathRules.sameBytes(path[index], literal) { return nil }
        }
        var captures: [String?] = []
        captures.reserveCapacity(captureNames.count)
        for (index, segment) in segments.enumerated() {
            switch segment {
            case .literal:
                continue
            case .capture:
                captures.append(path[index])
            case .rest:
                captures.append(path[index...].joined(separator: "/"))
            }
        }
        return captures
    }

    // MARK: Matching every document a query could return

    /// How a pattern covers the documents a query could return.
    enum Coverage {
        /// None of them.
        case none
        /// Some of them, perhaps: a condition proven with these captures (nil: unknown) holds
        /// for those.
        case some([String?])
        /// Every one of them.
        case all([String?])
    }

    /// How the pattern covers the documents of the collection `collection` (their ids unknown).
    func coverage(ofCollection collection: [String]) -> Coverage {
        let length = collection.count + 1
        if hasRest ? length < fixedCount : length != segments.count { return .none }
        var captures: [String?] = []
        var partial = false
        for (index, segment) in segments.enumerated() {
            let known: String? = index < collection.count ? collection[index] : nil
            switch segment {
            case .literal(let literal):
                if let known {
                    if !PathRules.sameBytes(known, literal) { return .none }
                } else {
                    // Only the document with this id.
                    partial = true
                }
            case .capture:
                captures.append(known)
            case .rest:
                // It holds the document's id, which is unknown.
                captures.append(nil)
            }
        }
        return partial ? .some(captures) : .all(captures)
    }

    /// How the pattern covers the documents of every collection named `group`, at any depth.
    func coverage(ofGroup group: String) -> Coverage {
        let unknown = [String?](repeating: nil, count: captureNames.count)
        if hasRest {
            // Captures then `{rest=**}` cover every document at least that deep: all of the
            // group's when that is at most two segments; a literal, or a longer prefix, only some.
            let onlyCaptures = segments.dropLast().allSatisfy { if case .capture = $0 { true } else { false } }
            return onlyCaptures && fixedCount <= 2 ? .all(unknown) : .some(unknown)
        }
        // A fixed length: the group's documents of that depth, if the collection segment allows.
        guard segments.count >= 2 else { return .none }
        var captures = unknown
        switch segments[segments.count - 2] {
        case .literal(let literal):
            if literal != group { return .none }
        case .capture(let name):
            captures[captureNames.firstIndex(of: name)!] = group
        case .rest:
            break
        }
        return .some(captures)
    }
}
