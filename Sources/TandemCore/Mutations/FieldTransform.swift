/// A change to one field computed from its current value, so concurrent writers commute.
public enum FieldTransform: Sendable, Hashable, Codable {
    /// Removes the field.
    case delete
    /// Adds a number. An int stays an int unless a double is added; a missing or non-number field
    /// counts as 0. Int overflow saturates.
    case increment(JSONValue)
    /// Appends each element not already present. A missing or non-array field counts as empty.
    case arrayUnion([JSONValue])
    /// Removes every element equal to one of these. A missing or non-array field becomes empty.
    case arrayRemove([JSONValue])
    /// The server's commit time, as an ISO 8601 string with milliseconds.
    case serverTimestamp

    /// Validates the operand: `increment` needs a number.
    public func validate(at field: FieldPath) throws(TandemError) {
        if case .increment(let operand) = self, !operand.isNumber {
            throw TandemError.invalidArgument("increment on '\(field)' needs a number, got \(operand.typeName).")
        }
    }

    /// The field's value after the transform, from its previous value; nil removes the field.
    public func apply(to previous: JSONValue?, serverTime: ServerTime) -> JSONValue? {
        switch self {
        case .delete:
            return nil
        case .increment(let operand):
            return Self.add(previous, operand)
        case .arrayUnion(let elements):
            var result = previous?.arrayValue ?? []
            for element in elements where !result.contains(where: { JSONValue.queryEquals($0, element) }) {
                result.append(element)
            }
            return .array(result)
        case .arrayRemove(let elements):
            let current = previous?.arrayValue ?? []
            return .array(current.filter { value in !elements.contains { JSONValue.queryEquals($0, value) } })
        case .serverTimestamp:
            return .string(serverTime.iso8601)
        }
    }

    static func add(_ previous: JSONValue?, _ operand: JSONValue) -> JSONValue {
        let base: JSONValue = (previous?.isNumber ?? false) ? previous! : .int(0)
        switch (base, operand) {
        case (.int(let a), .int(let b)):
            let (sum, overflow) = a.addingReportingOverflow(b)
            if overflow { return .int(b > 0 ? .max : .min) }
            return .int(sum)
        default:
            return .double((base.doubleValue ?? 0) + (operand.doubleValue ?? 0))
        }
    }
}
