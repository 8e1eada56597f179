/// The filters under the name code written for other Swift sync libraries uses: `where` beside
/// `whereField`, the same filters, so a query moves over unchanged.
///
/// ```swift
/// let cheapLamps = Query()
///     .where("category", isEqualTo: "lamps")
///     .where("price", isLessThan: 100)
/// ```
extension Query {
    /// Keeps documents whose field compares to the value with the operator.
    public func `where`(_ field: FieldPath, _ op: FilterOperator, _ value: JSONValue) -> Query { whereField(field, op, value) }
    public func `where`(_ field: FieldPath, isEqualTo value: JSONValue) -> Query { whereField(field, isEqualTo: value) }
    public func `where`(_ field: FieldPath, isNotEqualTo value: JSONValue) -> Query { whereField(field, isNotEqualTo: value) }
    public func `where`(_ field: FieldPath, isLessThan value: JSONValue) -> Query { whereField(field, isLessThan: value) }
    public func `where`(_ field: FieldPath, isLessThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, isLessThanOrEqualTo: value)
    }
    public func `where`(_ field: FieldPath, isGreaterThan value: JSONValue) -> Query { whereField(field, isGreaterThan: value) }
    public func `where`(_ field: FieldPath, isGreaterThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, isGreaterThanOrEqualTo: value)
    }
    /// Keeps documents whose array field contains the value.
    public func `where`(_ field: FieldPath, arrayContains value: JSONValue) -> Query { whereField(field, arrayContains: value) }
    /// Keeps documents whose array field contains any of the values.
    public func `where`(_ field: FieldPath, arrayContainsAny values: [JSONValue]) -> Query { whereField(field, arrayContainsAny: values) }
    /// Keeps documents whose field equals one of the values.
    public func `where`(_ field: FieldPath, in values: [JSONValue]) -> Query { whereField(field, in: values) }
    /// Keeps documents whose field exists, is not null, and equals none of the values.
    public func `where`(_ field: FieldPath, notIn values: [JSONValue]) -> Query { whereField(field, notIn: values) }
}
