import Foundation
import TandemCore
import Yams

/// Who may read and write which documents: an ordered list of rules, each a path pattern with
/// conditions, read from a rules file (`tandem serve --rules FILE`) in YAML or JSON.
///
/// ```yaml
/// rules:
///   - match: users/{uid}/{rest=**}
///     read: auth.uid == uid
///     write: auth.uid == uid
///   - match: rooms/{room}
///     read: auth != null
///     create: request.data.owner == auth.uid
///     update: resource.data.owner == auth.uid && request.data.owner == auth.uid
///     delete: resource.data.owner == auth.uid
/// ```
///
/// **Patterns.** Segments are literals, captures (`{room}`, one segment) or, last, `{rest=**}`
/// (any number of segments, none included). A pattern covers documents: without `**` it has an
/// even number of segments. The first rule whose pattern covers a document decides for it; a
/// document no rule covers cannot be read or written.
///
/// **Operations.** `read` is `get` (one document, or a document listener) and `list` (a query or
/// a collection listener); `write` is `create`, `update` and `delete`. A rule may give the five
/// apart; the specific one wins. An operation a rule does not give is denied.
///
/// **Conditions.** `true`, `false`; `auth` (null when anonymous), `auth.uid`,
/// `auth.token.<claim>`; `resource` (the stored document, null when there is none),
/// `resource.id`, `resource.data.<field>`; `request.data.<field>` (the document as the write
/// leaves it); a capture by its name; `'strings'`, numbers, `null`; `==`, `!=`, `&&`, `||`, `!` and
/// parentheses. A condition that reads something missing (a field the document lacks, the uid of
/// an anonymous caller) is not true.
///
/// **Queries.** Rules are not filters: a query or listener is allowed only when its own equality
/// filters prove the `list` condition for every document it could return (`where owner ==
/// <your uid>` proves `resource.data.owner == auth.uid`); otherwise it is refused whole. A query
/// with `or` filters (or an `in` of several values) is allowed only when every branch proves it.
///
/// In Swift, read a file with `init(contentsOfFile:)`, or parse text, and give the rules to a server's
/// `AccessControl`:
///
/// ```swift
/// let rules = try AccessRules(parsing: """
///     rules:
///       - match: public/{doc}
///         read: true
///     """)
/// configuration.access = AccessControl(tokens: try await BearerTokens(secret: secret), rules: rules)
/// ```
public struct AccessRules: Sendable {
    /// What a request does to a document.
    public enum Operation: Int, Sendable, CaseIterable, CustomStringConvertible {
        /// Reading one document, or listening to one.
        case get
        /// Running a query, or listening to a collection or a collection group.
        case list
        /// Writing a document where none exists.
        case create
        /// Writing over a document that exists.
        case update
        /// Deleting a document.
        case delete

        public var description: String {
            switch self {
            case .get: "get"
            case .list: "list"
            case .create: "create"
            case .update: "update"
            case .delete: "delete"
            }
        }
    }

    struct Rule: Sendable {
        let pattern: PathPattern
        /// By ``Operation/rawValue``; nil denies.
        let conditions: [RuleCondition?]
        /// The line of the file it starts on, when it came from one.
        let line: Int?
    }

    let rules: [Rule]

    /// How many rules there are.
    public var count: Int { rules.count }

    /// The rules of a server with an auth secret and no rules file: each signed-in user reads and
    /// writes `users/{their uid}` and every document below it, and nothing else.
    public static let ownDocuments: AccessRules = {
        let own = RuleCondition.compare(.authUID, equal: true, .capture(0))
        let pattern = PathPattern(segments: [.literal("users"), .capture("uid"), .rest("rest")], description: "users/{uid}/{rest=**}")
        return AccessRules(rules: [Rule(pattern: pattern, conditions: Array(repeating: own, count: 5), line: nil)])
    }()

    init(rules: [Rule]) {
        self.rules = rules
    }

    /// Parses a rules file's text (YAML, or JSON, which YAML reads too).
    public init(parsing text: String) throws(RulesFileError) {
        rules = try RulesFileParser(text: text).parse()
    }

    /// Reads and parses a rules file; its errors name the file, the line and the column.
    public init(contentsOfFile path: String) throws(TandemError) {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw TandemError(.notFound, "The rules file \(path) could not be read: \(describeFileError(error)). Check the path.")
        }
        do {
            try self.init(parsing: text)
        } catch {
            // One line an error, each naming its place.
            throw TandemError.invalidArgument(error.all.map { "\(path):\($0.line):\($0.column): \($0.message)" }.joined(separator: "\n"))
        }
    }

    // MARK: Deciding

    struct Decision {
        var truth: Truth
        /// The index of the rule that decided; nil when none covers the document.
        var rule: Int?
    }

    /// Whether `operation` on the document at `path` is allowed, with what is known of it.
    func decide(_ operation: Operation, at path: DocumentPath, auth: AuthenticatedUser?, resource: RuleDocument, request: RuleDocument = .absent) -> Decision {
        let segments = path.segments
        for (index, rule) in rules.enumerated() {
            guard let captures = rule.pattern.match(segments) else { continue }
            guard let condition = rule.conditions[operation.rawValue] else { return Decision(truth: .no, rule: index) }
            let input = RuleInput(auth: auth, captures: captures, resource: resource, request: request)
            return Decision(truth: condition.evaluate(input), rule: index)
        }
        return Decision(truth: .no, rule: nil)
    }

    /// Whether a query may run: `yes` only when its equality filters prove the `list` condition of
    /// every rule that could cover one of its documents, up to one that covers them all. A
    /// document target is a `get` of a document not read yet.
    ///
    /// Filters with `or` are proven branch by branch. The filters are taken in disjunctive normal
    /// form (`CompiledQuery.disjunctiveTerms`): every document the query returns passes every
    /// field filter of one term at least, so the query is allowed only when each term alone proves
    /// the rules (a conjunction is proven by all of its equalities together, as a query without
    /// `or` always was). One term that proves nothing refuses the query whole, whatever the others
    /// prove: conservative, never a document the caller may not read. `in` is an `or` of
    /// equalities on one field, and is proven the same way, value by value (see `provenFields(_:)`).
    func decideList(_ target: ListenTarget, auth: AuthenticatedUser?) -> Decision {
        if case .document(let path) = target { return decide(.get, at: path, auth: auth, resource: .unknown) }
        // The query was validated before it is checked (an invalid one is refused as such), so it
        // compiles. Were it not to, the proof uses no filter at all: it then proves less, never more.
        let terms = target.query.flatMap { try? CompiledQuery($0) }?.disjunctiveTerms ?? [[]]
        var decision = Decision(truth: .no, rule: nil)
        for term in terms {
            for fields in Self.provenFields(term) {
                decision = decideList(target, fields: fields, auth: auth)
                if decision.truth != .yes { return decision }
            }
        }
        return decision
    }

    /// The most equality sets one conjunction of filters is proven as, once its `in` filters are
    /// taken value by value; an `in` that would make more is not taken apart (it then proves
    /// nothing of its field, as before `or` was known).
    static let maximumProvenSets = CompiledQuery.maximumDisjunctions

    /// What a conjunction of filters (one term of a query's disjunctive normal form) says of the
    /// fields of every document that passes it, as sets of fields fixed to values: a document
    /// that passes the term has every field of at least one set equal to its value.
    ///
    /// `==` fixes its field; so does `in` with one value. An `in` of several values is an `or` of
    /// equalities, so it splits each set in one per value, unless its field is already fixed (by
    /// an `==` or another `in`: a document passing both has that value, so the set holds as it
    /// is) or the sets would number more than `maximumProvenSets`. Other filters fix nothing.
    /// Where two filters fix one field differently no document passes both, and either value
    /// proves what it proves of none.
    static func provenFields(_ term: [CompiledQuery.FieldFilter]) -> [[FieldPath: JSONValue]] {
        var fixed: [FieldPath: JSONValue] = [:]
        var alternatives: [(field: FieldPath, values: [JSONValue])] = []
        for filter in term {
            switch (filter.op, filter.value) {
            case (.equal, let value): fixed[filter.field] = value
            case (.in, .array(let values)) where values.count == 1: fixed[filter.field] = values[0]
            case (.in, .array(let values)) where values.count > 1: alternatives.append((filter.field, values))
            default: break
            }
        }
        var sets = [fixed]
        for (field, values) in alternatives where fixed[field] == nil && sets.count * values.count <= maximumProvenSets {
            // Two `in`s on one field: the first splits the sets, the second finds its field fixed.
            guard sets.allSatisfy({ $0[field] == nil }) else { continue }
            sets = sets.flatMap { known -> [[FieldPath: JSONValue]] in
                values.map { value -> [FieldPath: JSONValue] in
                    var split = known
                    split[field] = value
                    return split
                }
            }
        }
        return sets
    }

    /// Whether a query whose every document has these field values may run: the rules that could
    /// cover one of its documents, in order, up to one that covers them all.
    private func decideList(_ target: ListenTarget, fields: [FieldPath: JSONValue], auth: AuthenticatedUser?) -> Decision {
        for (index, rule) in rules.enumerated() {
            let coverage: PathPattern.Coverage
            switch target {
            case .document:
                return Decision(truth: .no, rule: nil)
            case .collection(let path, _):
                coverage = rule.pattern.coverage(ofCollection: path.segments)
            case .collectionGroup(let group, _):
                coverage = rule.pattern.coverage(ofGroup: group)
            }
            let captures: [String?]
            let whole: Bool
            switch coverage {
            case .none: continue
            case .some(let known): (captures, whole) = (known, false)
            case .all(let known): (captures, whole) = (known, true)
            }
            guard let condition = rule.conditions[Operation.list.rawValue] else { return Decision(truth: .no, rule: index) }
            let truth = condition.evaluate(RuleInput(auth: auth, captures: captures, resource: .constrained(fields: fields)))
            if truth != .yes || whole { return Decision(truth: truth, rule: index) }
        }
        return Decision(truth: .no, rule: nil)
    }

    /// Why a decision was not `yes`, for a refusal's message.
    func describe(_ rule: Int?) -> String {
        guard let rule else { return "no rule covers it" }
        let line = rules[rule].line.map { ", line \($0)" } ?? ""
        return "rule \(rule + 1) (\(rules[rule].pattern)\(line)) does not allow it"
    }
}

/// A rules file that did not parse: where, and what was expected there.
public struct RulesFileError: Error, Sendable, CustomStringConvertible {
    /// From 1.
    public var line: Int
    /// From 1, in characters (Unicode scalars).
    public var column: Int
    /// What is wrong there, or what was expected there.
    public var message: String
    /// The file's further errors, in its order: every rule is checked, and each wrong one is told.
    public var others: [RulesFileError] = []

    /// An error at `line` and `column` (each from 1) saying `message`.
    public init(line: Int, column: Int, message: String) {
        self.line = line
        self.column = column
        self.message = message
    }

    /// This error and the ``others``, each alone, in the file's order.
    public var all: [RulesFileError] {
        var first = self
        first.others = []
        return [first] + others
    }

    public var description: String { "line \(line), column \(column): \(message)" }
}

/// Reads a rules file's YAML (or JSON) into rules, with positions for every error.
struct RulesFileParser {
    let text: String
    private let lines: [Substring]

    init(text: String) {
        // JSON may indent with tabs, which YAML refuses; a tab outside a JSON string is only
        // whitespace, and one for one keeps every column.
        self.text = text.replacingOccurrences(of: "\t", with: " ")
        lines = self.text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
    }

    private static let keys = ["match", "read", "write", "get", "list", "create", "update", "delete"]

    func parse() throws(RulesFileError) -> [AccessRules.Rule] {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw Self.positioned(error)
        } catch {
            throw RulesFileError(line: 1, column: 1, message: "the file is not YAML or JSON: \(error)")
        }
        guard let root else {
            throw RulesFileError(line: 1, column: 1, message: "the file is empty: expected `rules:` and a list of rules")
        }
        let list: Node.Sequence
        if let mapping = root.mapping {
            var found: Node.Sequence?
            for (key, value) in mapping {
                guard key.string == "rules" else {
                    throw error(at: key, "unknown key `\(key.string ?? "?")`: the file has one key, `rules`")
                }
                guard let sequence = value.sequence else {
                    throw error(at: value, "expected a list of rules under `rules`")
                }
                found = sequence
            }
            guard let found else { throw error(at: root, "expected `rules:` and a list of rules") }
            list = found
        } else if let sequence = root.sequence {
            list = sequence
        } else {
            throw error(at: root, "expected `rules:` and a list of rules")
        }
        // Every rule is read, so each wrong one is told, not the first alone.
        var rules: [AccessRules.Rule] = []
        var errors: [RulesFileError] = []
        for node in list {
            do {
                rules.append(try rule(node))
            } catch {
                errors.append(error)
            }
        }
        if var first = errors.first {
            first.others = Array(errors.dropFirst())
            throw first
        }
        return rules
    }

    private func rule(_ node: Node) throws(RulesFileError) -> AccessRules.Rule {
        guard let mapping = node.mapping else {
            throw error(at: node, "expected a rule: a map with `match` and conditions (`read`, `write`, …)")
        }
        var values: [String: Node] = [:]
        for (key, value) in mapping {
            guard let name = key.string, Self.keys.contains(name) else {
                throw error(at: key, "unknown key `\(key.string ?? "?")`: a rule has \(Self.keys.map { "`\($0)`" }.joined(separator: ", "))")
            }
            if values[name] != nil { throw error(at: key, "`\(name)` appears twice in this rule") }
            values[name] = value
        }
        guard let matchNode = values["match"] else {
            throw error(at: node, "this rule has no `match`: give the path pattern it covers, say `users/{uid}/{rest=**}`")
        }
        guard let matchScalar = matchNode.scalar else { throw error(at: matchNode, "expected a path pattern") }
        let pattern: PathPattern
        do {
            pattern = try PathPattern(parsing: matchScalar.string)
        } catch {
            throw positioned(error, in: matchScalar)
        }
        var conditions = [RuleCondition?](repeating: nil, count: AccessRules.Operation.allCases.count)
        func condition(_ key: String) throws(RulesFileError) -> RuleCondition? {
            guard let value = values[key] else { return nil }
            guard let scalar = value.scalar else {
                throw error(at: value, "expected a condition: a string such as `auth != null`, or true or false")
            }
            do {
                return try RuleConditionParser.parse(scalar.string, captures: pattern.captureNames)
            } catch {
                throw positioned(error, in: scalar)
            }
        }
        let read = try condition("read")
        let write = try condition("write")
        conditions[AccessRules.Operation.get.rawValue] = try condition("get") ?? read
        conditions[AccessRules.Operation.list.rawValue] = try condition("list") ?? read
        conditions[AccessRules.Operation.create.rawValue] = try condition("create") ?? write
        conditions[AccessRules.Operation.update.rawValue] = try condition("update") ?? write
        conditions[AccessRules.Operation.delete.rawValue] = try condition("delete") ?? write
        if conditions.allSatisfy({ $0 == nil }) {
            throw error(at: node, "this rule allows nothing: give it `read`, `write`, or one of `get`, `list`, `create`, `update`, `delete`")
        }
        return AccessRules.Rule(pattern: pattern, conditions: conditions, line: node.mark?.line)
    }

    // MARK: Positions

    private func error(at node: Node, _ message: String) -> RulesFileError {
        RulesFileError(line: node.mark?.line ?? 1, column: node.mark?.column ?? 1, message: message)
    }

    /// An error inside a scalar, at its offset in the scalar's value.
    private func positioned(_ error: RuleSyntaxError, in scalar: Node.Scalar) -> RulesFileError {
        guard let mark = scalar.mark else { return RulesFileError(line: 1, column: 1, message: error.message) }
        let value = scalar.string.unicodeScalars
        switch scalar.style {
        case .literal, .folded:
            // The value starts on the line after the indicator, at the indentation of the block's
            // first line (deeper lines keep the rest of theirs in the value). Folding joins lines:
            // for `>` the line is that of the block's start.
            let before = value.prefix(error.offset)
            let lineIndex = before.filter { $0 == "\n" }.count
            let column = before.count - (before.lastIndex(of: "\n").map { before.distance(from: before.startIndex, to: $0) + 1 } ?? 0)
            let line = mark.line + 1 + lineIndex
            let indentation = mark.line < lines.count ? lines[mark.line].prefix(while: { $0 == " " }).count : 0
            return RulesFileError(line: line, column: indentation + column + 1, message: error.message)
        default:
            guard !value.contains("\n") else { return RulesFileError(line: mark.line, column: mark.column, message: error.message) }
            let quote = scalar.style == .singleQuoted || scalar.style == .doubleQuoted ? 1 : 0
            return RulesFileError(line: mark.line, column: mark.column + quote + error.offset, message: error.message)
        }
    }

    private static func positioned(_ error: YamlError) -> RulesFileError {
        switch error {
        case .scanner(let context, let problem, let mark, _), .parser(let context, let problem, let mark, _), .composer(let context, let problem, let mark, _):
            let about = context.map { " (\($0.text))" } ?? ""
            return RulesFileError(line: mark.line, column: mark.column, message: "the file is not valid YAML or JSON: \(problem)\(about)")
        case .reader(let problem, _, _, _):
            return RulesFileError(line: 1, column: 1, message: "the file could not be read as text: \(problem)")
        default:
            return RulesFileError(line: 1, column: 1, message: "the file is not valid YAML or JSON: \(error)")
        }
    }
}
