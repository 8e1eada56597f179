import Tandem

struct User: Identifiable, Sendable, Equatable {
    var id: String
    var name: String
}

struct Team: Identifiable, Sendable, Equatable {
    var id: String
    var name: String
}

/// An aggregate nested inside another: a comment carries its author.
struct Comment: Aggregate, Equatable {
    var id: Int
    var text: String
    var author: User

    static var nestedEntities: [NestedEntity<Comment>] { [.init(\.author)] }
}

/// An aggregate with a single, an optional and an array child.
struct Post: Aggregate, Equatable {
    var id: String
    var title: String
    var author: User
    var editor: User?
    var comments: [Comment]

    static var nestedEntities: [NestedEntity<Post>] { [.init(\.author), .init(\.editor), .init(\.comments)] }
}

let ada = User(id: "ada", name: "Ada")
let grace = User(id: "grace", name: "Grace")
let alan = User(id: "alan", name: "Alan")

/// An aggregate that can contain itself through others: A's friends hold B, whose friends hold A.
struct Person: Aggregate, Equatable {
    var id: String
    var name: String
    var friends: [Person]

    static var nestedEntities: [NestedEntity<Person>] { [.init(\.friends)] }
}
