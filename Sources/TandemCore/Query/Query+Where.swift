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
    /// Keeps documents whose field equals the value (`==`), as `whereField(_:isEqualTo:)` does.
    public func `where`(_ field: FieldPath, isEqualTo value: JSONValue) -> Query { whereField(field, isEqualTo: value) }
    /// Keeps documents whose field exists, is not null, and does not equal the value (`!=`), as
    /// `whereField(_:isNotEqualTo:)` does.
    public func `where`(_ field: FieldPath, isNotEqualTo value: JSONValue) -> Query { whereField(field, isNotEqualTo: value) }
    /// Keeps documents whose field is below the value (`<`), comparing only values of one type, as
    /// `whereField(_:isLessThan:)` does.
    public func `where`(_ field: FieldPath, isLessThan value: JSONValue) -> Query { whereField(field, isLessThan: value) }
    /// Keeps documents whose field is below or equal to the value (`<=`), comparing only values of
    /// one type, as `whereField(_:isLessThanOrEqualTo:)` does.
    public func `where`(_ field: FieldPath, isLessThanOrEqualTo value: JSONValue) -> Query {
        whereField(field, isLessThanOrEqualTo: value)
    }
    /// Keeps documents whose field is above the value (`>`), comparing only values of one type, as
    /// `whereField(_:isGreaterThan:)` does.
    public func `where`(_ field: FieldPath, isGreaterThan value: JSONValue) -> Query { whereField(field, isGreaterThan: value) }
    /// Keeps documents whose field is above or equal to the value (`>=`), comparing only values of
    /// one type, as `whereField(_:isGreaterThanOrEqualTo:)` does.
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
