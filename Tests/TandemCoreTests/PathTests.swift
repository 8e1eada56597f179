import Testing
@testable import TandemCore

@Suite("Paths")
struct PathTests {
    @Test("a document path has parent, id and collection group")
    func documentPath() throws {
        let path = try DocumentPath("products/p1/reviews/r9")
        #expect(path.id == "r9")
        #expect(path.parent == (try CollectionPath("products/p1/reviews")))
        #expect(path.collectionGroup == "reviews")
        #expect(path.parent.parent == (try DocumentPath("products/p1")))
        #expect(try DocumentPath("/users/ada/") == (try DocumentPath("users/ada")))
    }

    @Test("a collection path has parent, id and builds documents")
    func collectionPath() throws {
        let root = try CollectionPath("users")
        #expect(root.parent == nil)
        #expect(root.collectionGroup == "users")
        let doc = try root.document("ada")
        #expect(doc.description == "users/ada")
        #expect(root.contains(doc))
        #expect(try doc.collection("posts").description == "users/ada/posts")
        #expect(!(try CollectionPath("users/ada/posts")).contains(doc))
    }

    @Test("a path splits at every '/' byte, even one a combining mark or an emoji modifier joins into one Character; a stored path reads back the same")
    func slashesBeforeCombiningMarks() throws {
        // "/\u{301}" and "/🏻" are each one Character.
        for text in ["a/\u{301}b", "rooms/🏻x", "a/b/\u{301}/c"] {
            let path = try DocumentPath(text)
            #expect(path.segments == text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) })
            #expect(path.segments.count % 2 == 0 && path.description == text)
            // What a store reads back (`init?(trusted:)`) is the same path.
            #expect(DocumentPath(trusted: text) == path)
            #expect(DocumentPath(trusted: text)?.segments == path.segments)
        }
        #expect(PathRules.splitAtSlashes("/🏻//x") == ["", "🏻", "", "x"])
        #expect(throws: TandemError.self) { try DocumentPath("a//\u{301}") }
        #expect(throws: TandemError.self) { try CollectionPath("a/\u{301}b") }
    }

    @Test("every invalid path throws invalid-argument naming the path and the rule")
    func invalidPaths() throws {
        let cases: [(String, String, Bool)] = [
            ("users", "even number", true),
            ("users/ada", "odd number", false),
            ("users//ada", "empty segment", true),
            ("", "empty", true),
            ("users/" + String(repeating: "x", count: 1_501), "1501 bytes", true),
            (Array(repeating: "c/d", count: 51).joined(separator: "/"), "at most 100", true),
            ("a/..", "is '..'", true),
            ("a/.", "is '.'", true),
            ("../b/c", "is '..'", false),
            ("a/b/./d", "Segment 3", true),
        ]
        for (text, rule, isDocument) in cases {
            do {
                if isDocument { _ = try DocumentPath(text) } else { _ = try CollectionPath(text) }
                Issue.record("\(text.prefix(40)) should be invalid")
            } catch {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains(rule), "\(error.message)")
            }
        }
        #expect(throws: TandemError.self) { try DocumentPath(segments: ["users", "a/b"]) }
        #expect(throws: TandemError.self) { try DocumentPath(segments: ["users", ""]) }
        #expect(throws: TandemError.self) { try DocumentPath(segments: ["users", ".."]) }
        // Dots are fine beside other characters.
        _ = try DocumentPath("a/...")
        _ = try DocumentPath("a/.b")
        _ = try DocumentPath("a/b.")
        // Exactly at the limits is fine.
        _ = try DocumentPath("users/" + String(repeating: "x", count: 1_500))
        _ = try DocumentPath(Array(repeating: "c/d", count: 50).joined(separator: "/"))
    }

    @Test("catch TandemError.Code matches the code")
    func catchByCode() {
        var caught = false
        do {
            _ = try DocumentPath("users")
        } catch TandemError.Code.invalidArgument {
            caught = true
        } catch {}
        #expect(caught)
    }

    @Test("paths are equal when their bytes are: canonically equivalent spellings, which Swift's strings call equal, are two paths, as in every store")
    func equalityIsByBytes() throws {
        for (a, b) in [("k/K", "k/\u{212A}"), ("caf\u{E9}/x", "cafe\u{301}/x"), ("a/\u{212B}", "a/A\u{30A}")] {
            #expect(a == b, "Swift's strings call them equal")
            let first = try DocumentPath(a), second = try DocumentPath(b)
            #expect(first != second)
            #expect(Set([first, second]).count == 2)
            #expect((first < second) != (second < first), "exactly one sorts first")
            #expect(first.parent.description.utf8.elementsEqual(a.split(separator: "/")[0].utf8))
        }
        #expect(try DocumentPath("caf\u{E9}/x") == DocumentPath(segments: ["caf\u{E9}", "x"]))
        #expect(try CollectionPath("caf\u{E9}") != CollectionPath("cafe\u{301}"))
        let group = ListenTarget.collectionGroup("K", Query())
        #expect(group.covers(try DocumentPath("a/b/K/c")))
        #expect(!group.covers(try DocumentPath("a/b/\u{212A}/c")))
    }

    @Test("paths order segment by segment")
    func order() throws {
        #expect(try DocumentPath("a/b") < DocumentPath("a/b/c/d"))
        #expect(try DocumentPath("a/b/c/d") < DocumentPath("a/c"))
        #expect(try DocumentPath("A/z") < DocumentPath("a/a"))
    }

    @Test("ordering paths by their joined form agrees with ordering them segment by segment")
    func joinedOrderMatchesSegments() throws {
        var rng = SplitMix64(seed: 7)
        let alphabet = ["a", "b", "-", ".", "0", "~", "é", "ab", "a-b", "_"]
        func segment() -> String {
            let text = (0..<Int.random(in: 1...3, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }.joined()
            // "." and ".." name no segment.
            return text == "." || text == ".." ? text + "x" : text
        }
        for _ in 0..<2_000 {
            let a = try DocumentPath(segments: (0..<(2 * Int.random(in: 1...3, using: &rng))).map { _ in segment() })
            let b = try DocumentPath(segments: (0..<(2 * Int.random(in: 1...3, using: &rng))).map { _ in segment() })
            let bySegments = PathRules.compareSegmentsForTesting(a.segments, b.segments)
            #expect((a < b) == (bySegments == .less), "\(a) vs \(b)")
            #expect((a == b) == (bySegments == .equal))
        }
    }
}
