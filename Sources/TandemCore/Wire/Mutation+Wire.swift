extension FieldTransform {
    /// The transform as a JSON sentinel: `{"$increment": 1}`, `{"$arrayUnion": [...]}`,
    /// `{"$arrayRemove": [...]}`, `{"$serverTimestamp": true}`, `{"$delete": true}`.
    public var wireValue: JSONValue {
        switch self {
        case .delete: return ["$delete": true]
        case .increment(let operand): return .object(["$increment": operand])
        case .arrayUnion(let elements): return .object(["$arrayUnion": .array(elements)])
        case .arrayRemove(let elements): return .object(["$arrayRemove": .array(elements)])
        case .serverTimestamp: return ["$serverTimestamp": true]
        }
    }

    /// The transform a value stands for, if it is a sentinel (an object with one key starting with `$`).
    /// An unknown `$` key throws `invalid-argument`.
    public static func sentinel(in value: JSONValue, at field: FieldPath) throws(TandemError) -> FieldTransform? {
        guard case .object(let object) = value, object.count == 1, let (key, operand) = object.first, key.hasPrefix("$") else {
            return nil
        }
        switch key {
        case "$delete": return .delete
        case "$serverTimestamp": return .serverTimestamp
        case "$increment":
            guard operand.isNumber else {
                throw TandemError.invalidArgument("$increment on '\(field)' needs a number, got \(operand.typeName).")
            }
            return .increment(operand)
        case "$arrayUnion", "$arrayRemove":
            guard case .array(let elements) = operand else {
                throw TandemError.invalidArgument("\(key) on '\(field)' needs an array of values, got \(operand.typeName).")
            }
            return key == "$arrayUnion" ? .arrayUnion(elements) : .arrayRemove(elements)
        default:
            throw TandemError.invalidArgument("Unknown transform '\(key)' on '\(field)'; use $increment, $arrayUnion, $arrayRemove, $serverTimestamp or $delete.")
        }
    }
}

extension Mutation {
    /// The mutation on the wire:
    /// `{"op": "set"|"update"|"delete", "path", "data" | "fields", "merge", "mergeFields", "precondition", "id"}`,
    /// with transforms written in place as sentinels.
    public var wireValue: JSONValue {
        var object: JSONObject = ["path": .string(path.description)]
        switch kind {
        case .set(let data):
            object["op"] = "set"
            object["data"] = .object(Self.embedding(transforms, in: data))
        case .merge(let data, let fields):
            object["op"] = "set"
            object["merge"] = true
            object["data"] = .object(Self.embedding(transforms, in: data))
            if let fields { object["mergeFields"] = .array(fields.map { .string($0.description) }) }
        case .update(let values):
            object["op"] = "update"
            var fields: JSONObject = [:]
            for value in values { fields[value.field.description] = value.value }
            for transform in transforms { fields[transform.field.description] = transform.transform.wireValue }
            object["fields"] = .object(fields)
        case .delete:
            object["op"] = "delete"
        }
        switch precondition {
        case .exists(let exists)?: object["precondition"] = .object(["exists": .bool(exists)])
        case .version(let version)?: object["precondition"] = .object(["version": .int(Int(clamping: version.rawValue))])
        case nil: break
        }
        if let id { object["id"] = id.wireValue }
        return .object(object)
    }

    /// Reads a mutation in its wire form. Anything malformed throws `invalid-argument` saying what.
    public init(wire value: JSONValue, context: String = "the mutation") throws(TandemError) {
        let object = try WireObject(value, context: context)
        let path = try object.documentPath("path")
        let op = try object.string("op")
        var transforms: [Transform] = []
        let kind: Kind
        switch op {
        case "set":
            let data = try Self.extractingTransforms(from: try object.object("data"), prefix: [], into: &transforms)
            if try object.bool("merge", default: false) {
                var fields: [FieldPath]?
                if object.has("mergeFields") {
                    var list: [FieldPath] = []
                    for entry in try object.array("mergeFields") {
                        guard case .string(let text) = entry else {
                            throw TandemError.invalidArgument("mergeFields of \(path) must hold dotted field paths as strings, got \(entry.typeName).")
                        }
                        let field = try FieldPath(dotted: text)
                        if !transforms.contains(where: { $0.field == field }) { list.append(field) }
                    }
                    fields = list
                }
                kind = .merge(data, fields: fields)
            } else {
                // Ignoring it would replace the whole body where the writer meant to write a few fields.
                if object.has("mergeFields") {
                    throw TandemError.invalidArgument("mergeFields of \(path) applies with \"merge\": true; add it to write only those fields, or drop mergeFields to replace the whole body.")
                }
                kind = .set(data)
            }
        case "update":
            var values: [FieldValue] = []
            for (key, value) in try object.object("fields").sorted(by: { $0.key < $1.key }) {
                let field = try FieldPath(dotted: key)
                if let transform = try FieldTransform.sentinel(in: value, at: field) {
                    transforms.append(Transform(field, transform))
                } else {
                    values.append(FieldValue(field, try Self.checkedData(value, at: field)))
                }
            }
            kind = .update(values)
        case "delete":
            kind = .delete
        default:
            throw TandemError.invalidArgument("Unknown write op '\(op)' for \(path); use set, update or delete.")
        }
        // Sentinels come out of a dictionary: put them in a stable order.
        transforms.sort { $0.field.description < $1.field.description }
        var precondition: Precondition?
        if object.has("precondition") {
            let condition = WireObject(fields: try object.object("precondition"), context: "the precondition of \(path)")
            if condition.has("exists") {
                precondition = .exists(try condition.bool("exists", default: true))
            } else if condition.has("version") {
                precondition = .version(try condition.version("version"))
            } else {
                throw TandemError.invalidArgument("The precondition of \(path) must be {\"exists\": true|false} or {\"version\": n}.")
            }
        }
        let id = object.has("id") ? try MutationID(wire: try object.value("id")) : nil
        self.init(path: path, kind: kind, transforms: transforms, precondition: precondition, id: id)
    }

    private static func embedding(_ transforms: [Transform], in data: JSONObject) -> JSONObject {
        var data = data
        for transform in transforms { data.setValue(transform.transform.wireValue, at: transform.field) }
        return data
    }

    /// Takes the sentinels out of a body, recording each as a transform at its field path.
    private static func extractingTransforms(from data: JSONObject, prefix: [String], into transforms: inout [Transform]) throws(TandemError) -> JSONObject {
        var result = data
        for (key, value) in data {
            guard case .object(let child) = value else { continue }
            let segments = prefix + [key]
            let field = try FieldPath(segments)
            if let transform = try FieldTransform.sentinel(in: value, at: field) {
                transforms.append(Transform(field, transform))
                result[key] = nil
            } else {
                result[key] = .object(try extractingTransforms(from: child, prefix: segments, into: &transforms))
            }
        }
        return result
    }

    /// A value for an update field, which must not hold sentinels below its top level.
    private static func checkedData(_ value: JSONValue, at field: FieldPath) throws(TandemError) -> JSONValue {
        guard case .object(let object) = value else { return value }
        var transforms: [Transform] = []
        let cleaned = try extractingTransforms(from: object, prefix: field.segments, into: &transforms)
        if let first = transforms.first {
            throw TandemError.invalidArgument("A transform inside the value of update field '\(field)' (at '\(first.field)') is not allowed; name '\(first.field)' as its own field.")
        }
        return .object(cleaned)
    }
}
