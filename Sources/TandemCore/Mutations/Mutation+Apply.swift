extension Mutation {
    /// Checks the mutation's own shape: valid field paths, numeric increments, no field path written
    /// twice or inside another written one, an update that writes something.
    public func validate() throws(TandemError) {
        var written: [FieldPath] = []
        switch kind {
        case .set, .delete:
            break
        case .merge(_, let fields):
            if let fields {
                for field in fields {
                    guard field.isValid else { throw TandemError.invalidArgument("Merge field '\(field)' of \(path) has an empty key.") }
                }
                written += fields
            }
        case .update(let values):
            if values.isEmpty && transforms.isEmpty {
                throw TandemError.invalidArgument("The update of \(path) writes no field; pass at least one field path and value.")
            }
            for value in values {
                guard value.field.isValid else { throw TandemError.invalidArgument("Update field '\(value.field)' of \(path) has an empty key.") }
            }
            written += values.map(\.field)
        }
        for transform in transforms {
            guard transform.field.isValid else { throw TandemError.invalidArgument("Transform field '\(transform.field)' of \(path) has an empty key.") }
            try transform.transform.validate(at: transform.field)
        }
        written += transforms.map(\.field)
        try checkNumbersAreFinite()
        try checkNoSentinelShapedData()
        for (index, field) in written.enumerated() {
            for other in written[(index + 1)...] where field.isPrefix(of: other) || other.isPrefix(of: field) {
                throw TandemError.invalidArgument("The write to \(path) names '\(field)' and '\(other)'; a field may be written once, and not together with a field inside it.")
            }
        }
    }

    /// Checks the precondition (and, for `update`, existence) against the current document.
    public func checkPrecondition(against existing: Document?) throws(TandemError) {
        switch precondition {
        case .exists(true)? where existing == nil:
            throw TandemError(.failedPrecondition, "\(path) must exist for this write, but it does not.")
        case .exists(false)? where existing != nil:
            throw TandemError(.failedPrecondition, "\(path) must not exist for this write, but it does (version \(existing!.version)).")
        case .version(let expected)?:
            let actual = existing?.version ?? .zero
            if actual != expected {
                throw TandemError(.failedPrecondition, "\(path) was expected at version \(expected) but is at version \(actual); reload it and retry.")
            }
        default:
            break
        }
        if case .update = kind, existing == nil {
            throw TandemError(.notFound, "Cannot update \(path): no such document. Use set (or set with merge) to create it.")
        }
    }

    /// The new body, from the current one, without preconditions: nil when the write deletes the document.
    /// Transforms take their base from the current document, so concurrent transforms commute.
    public func applyToBody(_ existing: JSONObject?, serverTime: ServerTime) -> JSONObject? {
        var result: JSONObject
        switch kind {
        case .delete:
            return nil
        case .set(let data):
            result = data
        case .merge(let data, let fields):
            result = existing ?? [:]
            if let fields {
                for field in fields {
                    if let value = data[field: field] {
                        result.setValue(value, at: field)
                    } else {
                        result.removeValue(at: field)
                    }
                }
            } else {
                Self.deepMerge(data, into: &result)
            }
        case .update(let values):
            result = existing ?? [:]
            for value in values {
                result.setValue(value.value, at: value.field)
            }
        }
        for transform in transforms {
            let previous = existing?[field: transform.field]
            if let value = transform.transform.apply(to: previous, serverTime: serverTime) {
                result.setValue(value, at: transform.field)
            } else {
                result.removeValue(at: transform.field)
            }
        }
        return result
    }

    /// Validates, checks the precondition, and returns the document after the write (nil if deleted),
    /// stamped with `version` and the server time.
    public func apply(to existing: Document?, version: Version, serverTime: ServerTime) throws(TandemError) -> Document? {
        try validate()
        return try applyValidated(to: existing, version: version, serverTime: serverTime)
    }

    /// `apply` for a mutation already validated (a server validates a batch before it commits).
    package func applyValidated(to existing: Document?, version: Version, serverTime: ServerTime) throws(TandemError) -> Document? {
        try checkPrecondition(against: existing)
        guard let body = applyToBody(existing?.data, serverTime: serverTime) else { return nil }
        return Document(
            path: path,
            data: body,
            version: version,
            createTime: existing?.createTime ?? serverTime.date,
            updateTime: serverTime.date
        )
    }

    package static func deepMerge(_ source: JSONObject, into target: inout JSONObject) {
        for (key, value) in source {
            if case .object(let sourceChild) = value, case .object(var targetChild)? = target[key] {
                target[key] = nil
                deepMerge(sourceChild, into: &targetChild)
                target[key] = .object(targetChild)
            } else {
                target[key] = value
            }
        }
    }
}

extension Mutation {
    /// NaN and the infinities have no JSON spelling: a write holding one would be stored as
    /// something else (`null`), so it is refused instead. (Parsed JSON never holds one.)
    /// On the wire a one-key object whose key starts with `$` is a transform (`{"$increment": 1}`):
    /// as data the server would read it as one, or refuse it. Refused here, at once, with the way out.
    func checkNoSentinelShapedData() throws(TandemError) {
        func find(_ value: JSONValue, at path: [String]) -> (String, [String])? {
            switch value {
            case .object(let object):
                if object.count == 1, let key = object.keys.first, key.hasPrefix("$") { return (key, path) }
                for (key, child) in object { if let found = find(child, at: path + [key]) { return found } }
                return nil
            default:
                // Arrays are data on the wire, whatever they hold.
                return nil
            }
        }
        var values: [(JSONValue, [String])] = []
        switch kind {
        case .set(let data), .merge(let data, _): values = data.map { ($0.value, [$0.key]) }
        case .update(let fields): values = fields.map { ($0.value, $0.field.segments) }
        case .delete: break
        }
        for (value, path) in values {
            guard let (key, at) = find(value, at: path) else { continue }
            throw TandemError.invalidArgument("The write to \(self.path) holds {\"\(key)\": …} at '\(at.joined(separator: "."))': a one-key object whose key starts with '$' is how a transform is sent. Write transforms with FieldUpdate (.increment, .arrayUnion, …), or give the object another key.")
        }
    }

    func checkNumbersAreFinite() throws(TandemError) {
        func finite(_ value: JSONValue) -> Bool {
            switch value {
            case .double(let number): return number.isFinite
            case .array(let elements): return elements.allSatisfy(finite)
            case .object(let object): return object.values.allSatisfy(finite)
            default: return true
            }
        }
        let values: [JSONValue]
        switch kind {
        case .set(let data), .merge(let data, _): values = [.object(data)]
        case .update(let fields): values = fields.map(\.value)
        case .delete: values = []
        }
        let operands = transforms.map(\.transform.wireValue)
        if !(values + operands).allSatisfy(finite) {
            throw TandemError.invalidArgument("The write to \(path) holds NaN or an infinity, which JSON cannot carry; store such a value as a string or null.")
        }
    }
}
