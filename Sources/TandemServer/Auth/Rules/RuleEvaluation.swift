import TandemCore

/// A condition's answer. `maybe` is what a condition is when it cannot be decided: it reads
/// something missing (a field the document lacks, the uid of an anonymous caller), or something
/// not known yet (a query's documents, beyond what its filters say). Only `yes` allows.
enum Truth: Sendable, Equatable {
    case yes, no, maybe

    init(_ value: Bool) { self = value ? .yes : .no }

    static prefix func ! (truth: Truth) -> Truth {
        switch truth {
        case .yes: .no
        case .no: .yes
        case .maybe: .maybe
        }
    }
}

/// What a condition knows of a document: the stored one (`resource`) or the one a write leaves
/// (`request`).
enum RuleDocument: Sendable {
    /// Nothing: it is to be read later.
    case unknown
    /// There is no document.
    case absent
    case known(id: String, data: JSONObject)
    /// Some document a query could return: it exists, and the query's equality filters fix these
    /// fields (the rest are unknown).
    case constrained(fields: [FieldPath: JSONValue])

    init(_ document: Document?) {
        if let document { self = .known(id: document.path.id, data: document.data) } else { self = .absent }
    }
}

/// Everything a condition reads.
struct RuleInput {
    var auth: AuthenticatedUser?
    /// The pattern's captures, in order; nil where the path is not known (a query's document id).
    var captures: [String?]
    var resource: RuleDocument
    var request: RuleDocument = .absent
}

extension RuleCondition {
    func evaluate(_ input: RuleInput) -> Truth {
        switch self {
        case .constant(let value):
            return Truth(value)
        case .not(let inner):
            return !inner.evaluate(input)
        case .and(let a, let b):
            let left = a.evaluate(input)
            if left == .no { return .no }
            let right = b.evaluate(input)
            if right == .no { return .no }
            return left == .yes && right == .yes ? .yes : .maybe
        case .or(let a, let b):
            let left = a.evaluate(input)
            if left == .yes { return .yes }
            let right = b.evaluate(input)
            if right == .yes { return .yes }
            return left == .no && right == .no ? .no : .maybe
        case .compare(let a, let equal, let b):
            let same = RuleTerm.equal(a.term(input), b.term(input))
            return equal ? same : !same
        case .truthy(let operand):
            if case .value(.bool(let value)) = operand.term(input) { return Truth(value) }
            return .maybe
        }
    }
}

/// An operand's value, as far as it is known.
enum RuleTerm {
    case value(JSONValue)
    /// Something that exists, of unknown value (a document, a signed-in caller).
    case present
    case unknown

    static func equal(_ a: RuleTerm, _ b: RuleTerm) -> Truth {
        switch (a, b) {
        case (.value(let x), .value(let y)):
            return Truth(JSONValue.compare(x, y) == .equal)
        case (.present, .value(.null)), (.value(.null), .present):
            return .no
        default:
            return .maybe
        }
    }
}

extension RuleOperand {
    func term(_ input: RuleInput) -> RuleTerm {
        switch self {
        case .literal(let value):
            return .value(value)
        case .auth:
            return input.auth == nil ? .value(.null) : .present
        case .authUID:
            return input.auth.map { .value(.string($0.uid)) } ?? .unknown
        case .authToken(let keys):
            guard let claims = input.auth?.claims else { return .unknown }
            var value: JSONValue? = claims[keys[0]]
            for key in keys.dropFirst() { value = value?.objectValue?[key] }
            return value.map(RuleTerm.value) ?? .unknown
        case .resource:
            switch input.resource {
            case .unknown: return .unknown
            case .absent: return .value(.null)
            case .known, .constrained: return .present
            }
        case .resourceID:
            if case .known(let id, _) = input.resource { return .value(.string(id)) }
            return .unknown
        case .resourceData(let path):
            return Self.field(path, of: input.resource)
        case .requestData(let path):
            return Self.field(path, of: input.request)
        case .capture(let index):
            return input.captures[index].map { .value(.string($0)) } ?? .unknown
        }
    }

    private static func field(_ path: FieldPath, of document: RuleDocument) -> RuleTerm {
        switch document {
        case .known(_, let data): return data[field: path].map(RuleTerm.value) ?? .unknown
        case .constrained(let fields): return fields[path].map(RuleTerm.value) ?? .unknown
        case .unknown, .absent: return .unknown
        }
    }
}
