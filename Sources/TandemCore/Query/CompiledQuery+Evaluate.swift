extension Query {
    /// Runs the query over documents: filters, orders (ties broken by path), cursors, then the limit.
    /// Throws `invalid-argument` when the query is invalid.
    public func evaluate<Documents: Sequence>(_ documents: Documents) throws(TandemError) -> [Documents.Element]
    where Documents.Element: QueryDocument {
        try CompiledQuery(self).evaluate(documents)
    }

    /// Whether a document passes the query's filters (not its cursors or limit).
    public func matches(_ document: some QueryDocument) throws(TandemError) -> Bool {
        try CompiledQuery(self).matchesFilters(document.data)
    }
}

extension CompiledQuery {
    /// Runs the compiled query over documents.
    public func evaluate<Documents: Sequence>(_ documents: Documents) -> [Documents.Element]
    where Documents.Element: QueryDocument {
        // Decorate each surviving document with its order keys once, so sorting never walks fields.
        var rows: [(keys: [JSONValue?], element: Documents.Element)] = []
        for document in documents {
            let data = document.data
            guard matchesFilters(data) else { continue }
            let keys = orderValues(data)
            guard passesCursors(keys) else { continue }
            rows.append((keys, document))
        }
        let inOrder: ((keys: [JSONValue?], element: Documents.Element), (keys: [JSONValue?], element: Documents.Element)) -> Bool = { a, b in
            self.sortsBefore(a.keys, a.element.path, b.keys, b.element.path)
        }
        switch limit {
        case .first(let count) where count < rows.count / 4:
            return Self.smallest(count, of: rows, by: inOrder).map(\.element)
        case .first(let count):
            rows.sort(by: inOrder)
            return rows.prefix(count).map(\.element)
        case .last(let count):
            rows.sort(by: inOrder)
            return rows.suffix(count).map(\.element)
        case nil:
            rows.sort(by: inOrder)
            return rows.map(\.element)
        }
    }

    /// A document's values of the order fields, in order; nil where a field is missing.
    package func orderValues(_ data: JSONObject) -> [JSONValue?] {
        orders.map { data[field: $0.field] }
    }

    /// Whether a document with order values `a` at `aPath` comes before one with `b` at `bPath`:
    /// the orders in turn, then the path. The one order of results, on the server and in a cache.
    package func sortsBefore(_ a: [JSONValue?], _ aPath: DocumentPath, _ b: [JSONValue?], _ bPath: DocumentPath) -> Bool {
        for (index, order) in orders.enumerated() {
            var result = Self.compareKeys(a[index], b[index])
            if order.descending { result = result.reversedOrdering }
            if result != .equal { return result == .less }
        }
        return aPath < bPath
    }

    /// Whether order values lie within both cursors.
    package func passesCursors(_ values: [JSONValue?]) -> Bool {
        if let start, !passes(values, start, isStart: true) { return false }
        if let end, !passes(values, end, isStart: false) { return false }
        return true
    }

    /// Whether a document's fields pass every filter.
    package func matchesFilters(_ data: JSONObject) -> Bool {
        for filter in filters where !Self.matches(filter, data) {
            return false
        }
        return true
    }

    /// Whether a document's fields pass a filter: an `and` when every one of its filters holds, an
    /// `or` when one does; each field filter decides as it does alone (a missing field never
    /// matches), whichever branch it is in.
    static func matches(_ predicate: Predicate, _ data: JSONObject) -> Bool {
        switch predicate {
        case .field(let filter):
            return matches(filter, data[field: filter.field])
        case .and(let all):
            return all.allSatisfy { matches($0, data) }
        case .or(let branches):
            return branches.contains { matches($0, data) }
        }
    }

    /// The `count` smallest rows in order, without sorting the rest: a bounded max-heap.
    private static func smallest<Row>(_ count: Int, of rows: [Row], by inOrder: (Row, Row) -> Bool) -> [Row] {
        guard count > 0 else { return [] }
        var heap: [Row] = []
        heap.reserveCapacity(count)
        // heap[0] is the largest kept row; a row smaller than it replaces it.
        func siftDown(_ start: Int) {
            var parent = start
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var largest = parent
                if left < heap.count, inOrder(heap[largest], heap[left]) { largest = left }
                if right < heap.count, inOrder(heap[largest], heap[right]) { largest = right }
                if largest == parent { return }
                heap.swapAt(parent, largest)
                parent = largest
            }
        }
        func siftUp(_ start: Int) {
            var child = start
            while child > 0 {
                let parent = (child - 1) / 2
                guard inOrder(heap[parent], heap[child]) else { return }
                heap.swapAt(parent, child)
                child = parent
            }
        }
        for row in rows {
            if heap.count < count {
                heap.append(row)
                siftUp(heap.count - 1)
            } else if inOrder(row, heap[0]) {
                heap[0] = row
                siftDown(0)
            }
        }
        heap.sort(by: inOrder)
        return heap
    }

    /// Missing sorts below every value, null included.
    static func compareKeys(_ a: JSONValue?, _ b: JSONValue?) -> JSONValue.Ordering {
        switch (a, b) {
        case (nil, nil): return .equal
        case (nil, _): return .less
        case (_, nil): return .greater
        case (let x?, let y?): return JSONValue.compare(x, y)
        }
    }

    private func passes(_ keys: [JSONValue?], _ cursor: Cursor, isStart: Bool) -> Bool {
        var result = JSONValue.Ordering.equal
        for (index, value) in cursor.values.enumerated() {
            var order = Self.compareKeys(keys[index], value)
            if orders[index].descending { order = order.reversedOrdering }
            if order != .equal {
                result = order
                break
            }
        }
        switch result {
        case .equal: return cursor.inclusive
        case .less: return !isStart
        case .greater: return isStart
        }
    }

    static func matches(_ filter: FieldFilter, _ field: JSONValue?) -> Bool {
        guard let field else { return false }  // a missing field never matches
        switch filter.op {
        case .equal:
            return JSONValue.queryEquals(field, filter.value)
        case .notEqual:
            return !field.isNull && !JSONValue.queryEquals(field, filter.value)
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            guard field.typeOrder == filter.value.typeOrder else { return false }
            if case .double(let double) = field, double.isNaN { return false }
            let order = JSONValue.compare(field, filter.value)
            switch filter.op {
            case .lessThan: return order == .less
            case .lessThanOrEqual: return order != .greater
            case .greaterThan: return order == .greater
            default: return order != .less
            }
        case .arrayContains:
            guard case .array(let elements) = field else { return false }
            return elements.contains { JSONValue.queryEquals($0, filter.value) }
        case .arrayContainsAny:
            guard case .array(let elements) = field, case .array(let wanted) = filter.value else { return false }
            return elements.contains { element in wanted.contains { JSONValue.queryEquals(element, $0) } }
        case .in:
            guard case .array(let wanted) = filter.value else { return false }
            return wanted.contains { JSONValue.queryEquals(field, $0) }
        case .notIn:
            guard case .array(let excluded) = filter.value else { return false }
            if excluded.contains(where: \.isNull) { return false }
            return !field.isNull && !excluded.contains { JSONValue.queryEquals(field, $0) }
        }
    }
}

extension JSONValue.Ordering {
    var reversedOrdering: JSONValue.Ordering { reversed }
}

extension CompiledQuery {
    /// Whether a document's fields pass every filter and both cursors: membership in the result
    /// when the query has no limit.
    package func matchesFiltersAndCursors(_ data: JSONObject) -> Bool {
        guard matchesFilters(data) else { return false }
        if start == nil && end == nil { return true }
        return passesCursors(orderValues(data))
    }
}
