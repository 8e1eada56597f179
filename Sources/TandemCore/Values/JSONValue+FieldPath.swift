/// Field paths in a document body (a `JSONObject`): read, set and remove the value at a dotted path.
extension Dictionary where Key == String, Value == JSONValue {
    /// The value at a dotted field path, or nil when any key on the way is missing or not a map.
    public subscript(field path: FieldPath) -> JSONValue? {
        var current: JSONValue? = self[path.segments[0]]
        for segment in path.segments.dropFirst() {
            guard case .object(let object)? = current else { return nil }
            current = object[segment]
        }
        return current
    }

    /// Sets the value at a field path, creating (or replacing non-map) intermediate maps on the way.
    public mutating func setValue(_ value: JSONValue, at path: FieldPath) {
        Self.set(value, at: path.segments[...], in: &self)
    }

    /// Removes the value at a field path; missing intermediate keys are left alone.
    @discardableResult
    public mutating func removeValue(at path: FieldPath) -> JSONValue? {
        Self.remove(at: path.segments[...], in: &self)
    }

    private static func set(_ value: JSONValue, at segments: ArraySlice<String>, in object: inout JSONObject) {
        let key = segments.first!
        if segments.count == 1 {
            object[key] = value
            return
        }
        var child: JSONObject
        if case .object(let existing)? = object[key] {
            child = existing
            object[key] = nil  // release the reference so the nested map is mutated in place
        } else {
            child = [:]
        }
        set(value, at: segments.dropFirst(), in: &child)
        object[key] = .object(child)
    }

    private static func remove(at segments: ArraySlice<String>, in object: inout JSONObject) -> JSONValue? {
        let key = segments.first!
        if segments.count == 1 {
            return object.removeValue(forKey: key)
        }
        guard case .object(var child)? = object[key] else { return nil }
        object[key] = nil
        let removed = remove(at: segments.dropFirst(), in: &child)
        object[key] = .object(child)
        return removed
    }
}

extension JSONValue {
    /// The value at a field path inside an object, or nil.
    public subscript(field path: FieldPath) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[field: path]
    }
}
