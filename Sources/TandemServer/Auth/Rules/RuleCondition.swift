import TandemCore

/// One condition of a rules file, parsed: `auth != null && auth.uid == uid`.
///
/// The language is small on purpose: literals, a few names, `==` and `!=`, `&&`, `||`, `!` and
/// parentheses. See ``AccessRules`` for what each name means.
indirect enum RuleCondition: Sendable, Equatable {
    case constant(Bool)
    case not(RuleCondition)
    case and(RuleCondition, RuleCondition)
    case or(RuleCondition, RuleCondition)
    case compare(RuleOperand, equal: Bool, RuleOperand)
    /// An operand standing alone: true when it is the boolean `true`.
    case truthy(RuleOperand)

    /// Whether the condition reads the stored document or the written one: such a condition cannot
    /// be decided from the path and the caller alone.
    var readsDocuments: Bool {
        switch self {
        case .constant: return false
        case .not(let inner): return inner.readsDocuments
        case .and(let a, let b), .or(let a, let b): return a.readsDocuments || b.readsDocuments
        case .compare(let a, _, let b): return a.readsDocument || b.readsDocument
        case .truthy(let operand): return operand.readsDocument
        }
    }
}

/// What a condition compares.
enum RuleOperand: Sendable, Equatable {
    case literal(JSONValue)
    /// The caller: null when anonymous.
    case auth
    case authUID
    /// A claim of the caller's token (a path into the claims).
    case authToken([String])
    /// The stored document: null when there is none.
    case resource
    case resourceID
    case resourceData(FieldPath)
    /// The document as the write leaves it.
    case requestData(FieldPath)
    /// A capture of the rule's pattern, by its index.
    case capture(Int)

    var readsDocument: Bool {
        switch self {
        case .resource, .resourceID, .resourceData, .requestData: return true
        default: return false
        }
    }
}

/// Why a condition did not parse: where (in Unicode scalars from its start) and what was expected.
struct RuleSyntaxError: Error, Sendable {
    var offset: Int
    var message: String
}

/// Parses conditions by recursive descent over their Unicode scalars.
struct RuleConditionParser {
    /// Deeper nesting of parentheses and `!` is refused rather than recursed into.
    static let maximumDepth = 64
    /// More `&&` and `||` in one condition are refused: evaluation recurses through each.
    static let maximumOperators = 256

    private enum Token: Equatable {
        case name(String)
        case string(String)
        case number(JSONValue)
        case symbol(String)
        case end
    }

    private let scalars: [Unicode.Scalar]
    private let captures: [String]
    private var position = 0
    private var token: Token = .end
    private var tokenStart = 0
    private var depth = 0
    private var operators = 0

    /// Parses `text`, whose names may include `captures` (the pattern's, in order).
    static func parse(_ text: String, captures: [String]) throws(RuleSyntaxError) -> RuleCondition {
        var parser = RuleConditionParser(scalars: Array(text.unicodeScalars), captures: captures)
        try parser.advance()
        if parser.token == .end {
            throw RuleSyntaxError(offset: 0, message: "expected a condition (say `true`, or `auth != null`), found nothing")
        }
        let condition = try parser.parseOr()
        guard parser.token == .end else {
            throw parser.expected("`&&`, `||`, `==`, `!=` or the end of the condition")
        }
        return condition
    }

    private init(scalars: [Unicode.Scalar], captures: [String]) {
        self.scalars = scalars
        self.captures = captures
    }

    // MARK: Grammar

    private mutating func parseOr() throws(RuleSyntaxError) -> RuleCondition {
        var left = try parseAnd()
        while token == .symbol("||") {
            try countOperator()
            try advance()
            left = .or(left, try parseAnd())
        }
        return left
    }

    private mutating func parseAnd() throws(RuleSyntaxError) -> RuleCondition {
        var left = try parseUnary()
        while token == .symbol("&&") {
            try countOperator()
            try advance()
            left = .and(left, try parseUnary())
        }
        return left
    }

    private mutating func countOperator() throws(RuleSyntaxError) {
        operators += 1
        if operators > Self.maximumOperators {
            throw RuleSyntaxError(offset: tokenStart, message: "the condition has more than \(Self.maximumOperators) `&&` and `||`; split the rule, or write it more simply")
        }
    }

    private mutating func parseUnary() throws(RuleSyntaxError) -> RuleCondition {
        depth += 1
        defer { depth -= 1 }
        if depth > Self.maximumDepth {
            throw RuleSyntaxError(offset: tokenStart, message: "the condition nests more than \(Self.maximumDepth) levels deep; write it more simply")
        }
        if token == .symbol("!") {
            try advance()
            return .not(try parseUnary())
        }
        if token == .symbol("(") {
            try advance()
            let inner = try parseOr()
            guard token == .symbol(")") else { throw expected("`)`") }
            try advance()
            return inner
        }
        return try parseComparison()
    }

    private mutating func parseComparison() throws(RuleSyntaxError) -> RuleCondition {
        let start = tokenStart
        let left = try parseOperand()
        if token == .symbol("==") || token == .symbol("!=") {
            let equal = token == .symbol("==")
            try advance()
            let right = try parseOperand()
            return .compare(left, equal: equal, right)
        }
        switch left {
        case .literal(.bool(let value)):
            return .constant(value)
        case .authToken, .resourceData, .requestData:
            return .truthy(left)
        default:
            throw RuleSyntaxError(offset: start, message: "expected `==` or `!=` after this value: only true, false, a token claim or a document field stands alone as a condition")
        }
    }

    private mutating func parseOperand() throws(RuleSyntaxError) -> RuleOperand {
        let start = tokenStart
        switch token {
        case .string(let text):
            try advance()
            return .literal(.string(text))
        case .number(let value):
            try advance()
            return .literal(value)
        case .name(let name):
            try advance()
            return try reference(name, at: start)
        default:
            throw expected("a value: a name (auth, resource, request or a capture), a 'string', a number, true, false or null")
        }
    }

    private mutating func reference(_ name: String, at start: Int) throws(RuleSyntaxError) -> RuleOperand {
        switch name {
        case "true": return .literal(.bool(true))
        case "false": return .literal(.bool(false))
        case "null": return .literal(.null)
        case "auth":
            guard token == .symbol(".") else { return .auth }
            try advance()
            switch try readName(expecting: "`uid` or `token` after `auth.`") {
            case "uid": return .authUID
            case "token": return .authToken(try fieldKeys(after: "auth.token"))
            default: throw RuleSyntaxError(offset: tokenStartOfLastName, message: "expected `uid` or `token` after `auth.`")
            }
        case "resource":
            guard token == .symbol(".") else { return .resource }
            try advance()
            switch try readName(expecting: "`id` or `data` after `resource.`") {
            case "id": return .resourceID
            case "data": return .resourceData(try fieldPath(after: "resource.data"))
            default: throw RuleSyntaxError(offset: tokenStartOfLastName, message: "expected `id` or `data` after `resource.`")
            }
        case "request":
            guard token == .symbol(".") else { throw expected("`.data.<field>` after `request`") }
            try advance()
            guard try readName(expecting: "`data` after `request.`") == "data" else {
                throw RuleSyntaxError(offset: tokenStartOfLastName, message: "expected `data` after `request.`")
            }
            return .requestData(try fieldPath(after: "request.data"))
        default:
            if let index = captures.firstIndex(of: name) { return .capture(index) }
            let known = captures.isEmpty ? "this rule's pattern captures nothing" : "this rule's pattern captures \(captures.joined(separator: ", "))"
            throw RuleSyntaxError(offset: start, message: "unknown name `\(name)`: a condition reads auth, resource, request or a capture of its pattern, and \(known)")
        }
    }

    private var tokenStartOfLastName = 0

    /// The name token at the cursor, consumed.
    private mutating func readName(expecting what: String) throws(RuleSyntaxError) -> String {
        guard case .name(let name) = token else { throw expected(what) }
        tokenStartOfLastName = tokenStart
        try advance()
        return name
    }

    /// `.key` at least once, then any more `.key`s.
    private mutating func fieldKeys(after prefix: String) throws(RuleSyntaxError) -> [String] {
        var keys: [String] = []
        repeat {
            guard token == .symbol(".") else { throw expected("`.<field>` after `\(prefix)`") }
            try advance()
            keys.append(try readName(expecting: "a field name after `\(prefix).`"))
        } while token == .symbol(".")
        return keys
    }

    private mutating func fieldPath(after prefix: String) throws(RuleSyntaxError) -> FieldPath {
        let keys = try fieldKeys(after: prefix)
        do {
            return try FieldPath(keys)
        } catch {
            throw RuleSyntaxError(offset: tokenStart, message: error.message)
        }
    }

    private func expected(_ what: String) -> RuleSyntaxError {
        RuleSyntaxError(offset: tokenStart, message: "expected \(what), found \(describe(token))")
    }

    private func describe(_ token: Token) -> String {
        switch token {
        case .name(let name): return "`\(name)`"
        case .string: return "a string"
        case .number: return "a number"
        case .symbol(let symbol): return "`\(symbol)`"
        case .end: return "the end of the condition"
        }
    }

    // MARK: Tokens

    private mutating func advance() throws(RuleSyntaxError) {
        while position < scalars.count, scalars[position].properties.isWhitespace { position += 1 }
        tokenStart = position
        guard position < scalars.count else {
            token = .end
            return
        }
        let scalar = scalars[position]
        func next(_ offset: Int) -> Unicode.Scalar? {
            position + offset < scalars.count ? scalars[position + offset] : nil
        }
        switch scalar {
        case "(", ")", ".":
            position += 1
            token = .symbol(String(scalar))
        case "!":
            if next(1) == "=" {
                position += 2
                token = .symbol("!=")
            } else {
                position += 1
                token = .symbol("!")
            }
        case "=", "&", "|":
            guard next(1) == scalar else {
                let double = String(scalar) + String(scalar)
                throw RuleSyntaxError(offset: position, message: "expected `\(double)`, found `\(scalar)` alone")
            }
            position += 2
            token = .symbol(String(scalar) + String(scalar))
        case "'", "\"":
            token = .string(try readString(quote: scalar))
        case "-", "0"..."9":
            token = .number(try readNumber())
        default:
            guard Self.isNameStart(scalar) else {
                throw RuleSyntaxError(offset: position, message: "unexpected character `\(scalar)`")
            }
            var name = String.UnicodeScalarView()
            while position < scalars.count, Self.isNamePart(scalars[position]) {
                name.append(scalars[position])
                position += 1
            }
            token = .name(String(name))
        }
    }

    private mutating func readString(quote: Unicode.Scalar) throws(RuleSyntaxError) -> String {
        let start = position
        position += 1
        var text = String.UnicodeScalarView()
        while position < scalars.count {
            let scalar = scalars[position]
            position += 1
            if scalar == quote { return String(text) }
            if scalar == "\\" {
                guard position < scalars.count else { break }
                text.append(scalars[position])
                position += 1
            } else {
                text.append(scalar)
            }
        }
        throw RuleSyntaxError(offset: start, message: "this string has no closing \(quote)")
    }

    private mutating func readNumber() throws(RuleSyntaxError) -> JSONValue {
        let start = position
        var text = ""
        if scalars[position] == "-" {
            text.append("-")
            position += 1
        }
        while position < scalars.count, ("0"..."9").contains(scalars[position]) || scalars[position] == "." {
            text.unicodeScalars.append(scalars[position])
            position += 1
        }
        if let int = Int(text) { return .int(int) }
        if let double = Double(text), double.isFinite { return .double(double) }
        throw RuleSyntaxError(offset: start, message: "`\(text)` is not a number")
    }

    private static func isNameStart(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "_" || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
    }

    private static func isNamePart(_ scalar: Unicode.Scalar) -> Bool {
        isNameStart(scalar) || ("0"..."9").contains(scalar)
    }
}
