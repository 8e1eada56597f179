import Foundation
import Testing
import TandemCore

/// The TandemCore landing page's code, run.
@Suite("TandemCore landing page")
struct TandemCoreSnippets {
    @Test("a path, a query run by the shared evaluator, and a write")
    func overview() throws {
        // snippet: tandem-core-overview
        let ada = try DocumentPath("users/ada")
        let people = [
            Document(path: ada, data: ["name": "Ada", "age": 36]),
            Document(path: try DocumentPath("users/tim"), data: ["name": "Tim", "age": 12]),
        ]
        let adults = Query().whereField("age", isGreaterThanOrEqualTo: 18).order(by: "age", descending: true).limit(to: 10)
        let answer = try CompiledQuery(adults).evaluate(people)      // [users/ada]: the server runs the same code
        let birthday = Mutation.update(ada, fields: [:], transforms: [.init("age", .increment(1))])
        // end snippet
        #expect(answer.map(\.path) == [ada])
        #expect(birthday.path == ada)
    }
}
