import Synchronization
import Testing
@testable import Tandem

@Suite("Identity map")
struct IdentityMapTests {
    // MARK: 1. Stamps

    @Test("a logger hears of every entity stored and every one refused, a refused batch whole")
    func logger() throws {
        final class Recorder: IdentityMapLogger {
            let lines = Mutex<[String]>([])
            func didStore<T: Identifiable>(_ type: T.Type, id: T.ID) { lines.withLock { $0.append("stored \(T.self) \(id)") } }
            func didFailedToStore<T: Identifiable>(_ type: T.Type, id: T.ID, error: IdentityMapError) {
                lines.withLock { $0.append("refused \(T.self) \(id) \(error.code.rawValue)") }
            }
        }
        let recorder = Recorder()
        let map = IdentityMap(logger: recorder)
        let ada = try map.store(User(id: "ada", name: "Ada"), stamp: 2)
        #expect(throws: IdentityMapError.self) { _ = try map.store(User(id: "ada", name: "Old"), stamp: 1) }
        #expect(throws: IdentityMapError.self) {
            _ = try map.store(entities: [User(id: "bob", name: "Bob"), User(id: "ada", name: "Older")], stamp: 1)
        }
        let list = try map.store([User(id: "cy", name: "Cy")], aliased: "team")
        #expect(recorder.lines.withLock { $0 } == [
            "stored User ada", "refused User ada stale-stamp", "refused User bob stale-stamp", "refused User ada stale-stamp", "stored User cy",
        ])
        withExtendedLifetime((ada, list)) {}
    }

    @Test("a stamp equal to or lower than the stored one is rejected with the current stamp")
    func staleStamps() throws {
        let map = IdentityMap()
        let held = try map.store(ada, stamp: 2)
        for stale: Stamp in [2, 1] {
            do {
                _ = try map.store(User(id: "ada", name: "Old"), stamp: stale)
                Issue.record("stamp \(stale) should be rejected")
            } catch {
                #expect(error.code == .staleStamp)
                #expect(error.currentStamp == 2)
                #expect(error.rejectedStamp == stale)
            }
        }
        #expect(held.value.name == "Ada")
        _ = try map.store(User(id: "ada", name: "New"), stamp: 3)
        #expect(held.value.name == "New")
    }

    @Test("a nil stamp applies without changing the stored stamp")
    func nilStamp() throws {
        let map = IdentityMap()
        let held = try map.store(ada, stamp: 5)
        _ = try map.store(User(id: "ada", name: "Unstamped"))
        #expect(held.value.name == "Unstamped")
        #expect(throws: IdentityMapError.self) { try map.store(User(id: "ada", name: "x"), stamp: 5) }
        _ = try map.store(User(id: "ada", name: "Six"), stamp: 6)
        #expect(held.value.name == "Six")
    }

    @Test("a batch that names an entity twice stores it once, its last value; a stale stamp in a batch throws before anything is applied")
    func batches() throws {
        let map = IdentityMap()
        // The same id twice with one stamp: not stale against itself; the last copy wins.
        let held = try map.store(entities: [ada, grace, User(id: "ada", name: "Ada again")], stamp: 1)
        #expect(held.map(\.value.name) == ["Ada again", "Grace", "Ada again"])
        // Alan is new, Grace's stamp is stale: nothing is applied, Alan included.
        do {
            _ = try map.store(entities: [alan, User(id: "grace", name: "Stale")], stamp: 1)
            Issue.record("a stale stamp in the batch should throw")
        } catch {
            #expect(error.code == .staleStamp && error.currentStamp == 1)
        }
        #expect(map.find(User.self, id: "alan") == nil)
        #expect(held[1].value.name == "Grace")
        // The aliased list form: the alias keeps the order and the repeat, the entity is stored once.
        let list = try map.store([alan, ada, alan], aliased: "trio", stamp: 2)
        #expect(list.value?.map(\.name) == ["Alan", "Ada", "Alan"])
        #expect(throws: IdentityMapError.self) { try map.store([User(id: "bob", name: "Bob"), ada], aliased: "pair", stamp: 2) }
        #expect(map.find(User.self, id: "bob") == nil && map.find([User].self, aliased: "pair").value == nil)
        // An aggregate stores its nested entities first: a later entity of the batch with the
        // batch's stamp is not stale against that nested copy, and its own value is kept.
        let nestedB = Person(id: "b", name: "B as A's friend", friends: [])
        let a = Person(id: "a", name: "A", friends: [nestedB])
        let people = try map.store(entities: [a, Person(id: "b", name: "B", friends: [])], stamp: 3)
        #expect(people[1].value.name == "B" && people[0].value.friends.map(\.name) == ["B"])
    }

    @Test("catch IdentityMapError.Code.staleStamp reads well")
    func catchByCode() throws {
        let map = IdentityMap()
        let held = try map.store(ada, stamp: 1)
        var caught = false
        do {
            _ = try map.store(ada, stamp: 1)
        } catch IdentityMapError.Code.staleStamp {
            caught = true
        } catch {}
        #expect(caught)
        _ = held
    }

    // MARK: 2. Aliases

    @Test("aliases hold their entity strongly; removeAlias makes observers see nil")
    func aliases() async throws {
        let map = IdentityMap()
        try map.store(ada, aliased: "current_user")  // the returned observer is dropped at once
        #expect(map.find(User.self, aliased: "current_user").value == ada)
        #expect(map.find(User.self, id: "ada")?.value == ada)

        let alias = map.find(User.self, aliased: "current_user")
        var values = alias.values.makeAsyncIterator()
        #expect(await values.next() == .some(ada))
        map.removeAlias(User.self, named: "current_user")
        #expect(await values.next() == .some(nil))
        #expect(alias.value == nil)
        try map.store(grace, aliased: "current_user")
        #expect(await values.next() == .some(grace))
    }

    @Test("list aliases keep order and follow their entities")
    func listAliases() async throws {
        let map = IdentityMap()
        let team = try map.store([ada, grace], aliased: "team")
        #expect(team.value == [ada, grace])
        var values = team.values.makeAsyncIterator()
        #expect(await values.next() == .some([ada, grace]))
        map.update(User.self, id: "grace") { $0.name = "Grace Hopper" }
        #expect(await values.next() == .some([ada, User(id: "grace", name: "Grace Hopper")]))
        map.removeAlias([User].self, named: "team")
        #expect(await values.next() == .some(nil))
        #expect(map.find(User.self, id: "ada") == nil)
    }

    @Test("the same alias name for two types is two aliases")
    func aliasNamesPerType() throws {
        let map = IdentityMap()
        try map.store(ada, aliased: "main")
        try map.store(Team(id: "t", name: "Engines"), aliased: "main")
        try map.store([grace], aliased: "main")
        #expect(map.find(User.self, aliased: "main").value == ada)
        #expect(map.find(Team.self, aliased: "main").value?.name == "Engines")
        #expect(map.find([User].self, aliased: "main").value == [grace])
        map.removeAlias(Team.self, named: "main")
        #expect(map.find(Team.self, aliased: "main").value == nil)
        #expect(map.find(User.self, aliased: "main").value == ada)
        map.removeAllAliases()
        #expect(map.find(User.self, aliased: "main").value == nil)
        #expect(map.find([User].self, aliased: "main").value == nil)
        #expect(map.find(User.self, id: "ada") == nil)
    }

    // MARK: 3. Release

    @Test("unaliased entities nobody observes are released")
    func release() async throws {
        let map = IdentityMap()
        _ = try map.store(ada)
        #expect(map.find(User.self, id: "ada") == nil, "nothing held it")

        var held: EntityObserver<User>? = try map.store(ada)
        #expect(map.find(User.self, id: "ada")?.value == ada)
        var iterator: EntityObservation<User>.Iterator? = held!.values.makeAsyncIterator()
        #expect(await iterator?.next() == ada)
        held = nil
        #expect(map.find(User.self, id: "ada") != nil, "the iteration still holds it")
        iterator = nil
        #expect(map.find(User.self, id: "ada") == nil, "released after the last observer went")
    }

    @Test("a cancelled observing task lets go of its entity")
    func releaseOnCancel() async throws {
        let map = IdentityMap()
        var observer: EntityObserver<User>? = try map.store(ada)
        let values = observer!.values
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let task = Task {
            for await _ in values { startedContinuation.yield() }
        }
        var it = started.makeAsyncIterator()
        await it.next()
        observer = nil
        #expect(map.find(User.self, id: "ada") != nil, "the observing task still holds it")
        task.cancel()
        await task.value
        #expect(map.find(User.self, id: "ada") == nil)
    }

    // MARK: 4. Aggregates

    @Test("storing an aggregate stores its nested entities, and they update it")
    func aggregates() async throws {
        let map = IdentityMap()
        let post = try map.store(Post(
            id: "p1", title: "Engines", author: ada, editor: grace,
            comments: [Comment(id: 1, text: "Nice", author: alan), Comment(id: 2, text: "Agreed", author: ada)]
        ))
        #expect(map.find(User.self, id: "alan")?.value == alan)
        #expect(map.find(Comment.self, id: 1)?.value.text == "Nice")

        var values = post.values.makeAsyncIterator()
        _ = await values.next()
        map.update(User.self, id: "ada") { $0.name = "Ada L." }
        let updated = try #require(await values.next())
        #expect(updated.author.name == "Ada L.")
        #expect(updated.comments[1].author.name == "Ada L.", "a nested aggregate's child updates the outer one")
        #expect(post.value == updated)

        _ = try map.store(User(id: "grace", name: "Grace H."))
        #expect(await values.next()?.editor?.name == "Grace H.")
        _ = try map.store(Comment(id: 1, text: "Edited", author: alan))
        #expect(await values.next()?.comments[0].text == "Edited")
    }

    @Test("updating a nested entity updates aliased lists that contain it")
    func aggregatesInAliasedLists() async throws {
        let map = IdentityMap()
        let feed = try map.store([Post(id: "p1", title: "A", author: ada, editor: nil, comments: [])], aliased: "feed")
        _ = try map.store(User(id: "ada", name: "Ada 2"))
        #expect(feed.value?.first?.author.name == "Ada 2")
    }

    @Test("a child removed from an aggregate and stored again is detached from it")
    func detach() async throws {
        let map = IdentityMap()
        let c1 = Comment(id: 1, text: "one", author: alan)
        let c2 = Comment(id: 2, text: "two", author: alan)
        let post = try map.store(Post(id: "p1", title: "A", author: ada, editor: nil, comments: [c1, c2]))
        _ = try map.store(Post(id: "p1", title: "A", author: ada, editor: nil, comments: [c1]))
        #expect(map.find(Comment.self, id: 2) == nil, "nothing holds the removed child any more")
        let c2Held = try map.store(Comment(id: 2, text: "two, edited", author: alan))
        #expect(post.value.comments.map(\.id) == [1])
        map.update(Comment.self, id: 1) { $0.text = "one, edited" }
        #expect(post.value.comments.map(\.text) == ["one, edited"])
        _ = c2Held
    }

    @Test("a stale nested entity keeps the newer stored one inside the aggregate")
    func staleNestedEntity() throws {
        let map = IdentityMap()
        let held = try map.store(User(id: "ada", name: "Newest"), stamp: 10)
        let post = try map.store(Post(id: "p1", title: "A", author: User(id: "ada", name: "Older"), editor: nil, comments: []), stamp: 5)
        #expect(post.value.author.name == "Newest")
        _ = held
    }

    @Test("aggregates that contain each other update without looping")
    func cycles() throws {
        let map = IdentityMap()
        let b = Person(id: "b", name: "B", friends: [Person(id: "a", name: "A", friends: [])])
        let a = try map.store(Person(id: "a", name: "A", friends: [b]))
        // Now a → b → a: a change to b reaches a, and a change to a reaches b, and both terminate.
        map.update(Person.self, id: "b") { $0.name = "B2" }
        #expect(a.value.friends.first?.name == "B2")
        map.update(Person.self, id: "a") { $0.name = "A2" }
        #expect(map.find(Person.self, id: "b")?.value.friends.first?.name == "A2")
    }

    // MARK: 5. Observation

    @Test("an observer gets the current value at once, then each change")
    func observation() async throws {
        let map = IdentityMap()
        let observer = try map.store(ada)
        var values = observer.values.makeAsyncIterator()
        #expect(await values.next() == ada)
        _ = try map.store(User(id: "ada", name: "1"))
        _ = try map.store(User(id: "ada", name: "2"))
        #expect(await values.next()?.name == "1")
        #expect(await values.next()?.name == "2")
    }

    @Test("several changes in one transaction reach an observer as one value")
    func transactions() async throws {
        let map = IdentityMap()
        let observer = try map.store(ada)
        var values = observer.values.makeAsyncIterator()
        _ = await values.next()
        try map.transaction { tx in
            try tx.store(User(id: "ada", name: "first"))
            tx.update(User.self, id: "ada") { $0.name += " then second" }
            try tx.store(grace)
        }
        _ = try map.store(User(id: "ada", name: "marker"))
        #expect(await values.next()?.name == "first then second")
        #expect(await values.next()?.name == "marker", "no intermediate value was delivered")
    }

    @Test("observers of several entities get one notification per transaction")
    func severalEntities() async throws {
        let map = IdentityMap()
        let held = try map.store(entities: [ada, grace, alan])
        var values = map.values(for: User.self, ids: ["grace", "ada", "nobody"]).makeAsyncIterator()
        #expect(await values.next()?.map(\.id) == ["grace", "ada"])
        try map.transaction { tx in
            try tx.store(User(id: "ada", name: "A"))
            try tx.store(User(id: "grace", name: "G"))
            try tx.store(User(id: "alan", name: "not observed"))
        }
        _ = try map.store(User(id: "nobody", name: "N"))  // held by the observation, so it stays
        #expect(await values.next()?.map(\.name) == ["G", "A"])
        #expect(await values.next()?.map(\.name) == ["G", "A", "N"])
        _ = held
    }

    @Test("concurrent writers and readers from many tasks end consistent")
    func concurrency() async throws {
        let map = IdentityMap()
        let observer = try map.store(User(id: "counter", name: "0"), stamp: 0)
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for step in 0..<250 {
                        let stamp = Stamp(task * 1_000 + step + 1)
                        _ = try? map.store(User(id: "counter", name: "\(stamp)"), stamp: stamp)
                        _ = map.find(User.self, id: "counter")?.value
                        map.update(User.self, id: "other-\(task)") { _ in }
                    }
                }
            }
        }
        #expect(observer.value.name == "7250.0")
    }

    // MARK: 6. Update

    @Test("update returns false when the entity is absent, true after changing it")
    func update() throws {
        let map = IdentityMap()
        #expect(!map.update(User.self, id: "ada") { $0.name = "x" })
        let held = try map.store(ada, stamp: 3)
        #expect(map.update(User.self, id: "ada") { $0.name = "Changed" })
        #expect(held.value.name == "Changed")
        #expect(throws: IdentityMapError.self) { try map.store(ada, stamp: 3) }  // the stamp was kept
    }
}
