import Crypto
import Foundation
import Tandem
import TandemCore

/// The code of the conflicts article (`Sources/Tandem/Tandem.docc/Conflicts.md`): compiled, not
/// run.
enum ConflictsSnippets {
    static func precondition(client: TandemClient) async throws {
        // snippet: conflicts-precondition
        let path = try DocumentPath("products/lamp")
        guard let read = try await client.document(at: path) else { return }
        var data = read.data
        data["price"] = 35
        do {
            _ = try await client.commit([Mutation.set(path, data).requiring(.version(read.version))])
        } catch TandemError.Code.failedPrecondition {
            // Someone wrote products/lamp after read.version: nothing was applied. Read it again, decide.
        }
        // end snippet
    }

    static func resolver() {
        // snippet: conflicts-resolver
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.resolver = ConflictResolver { conflict in
            var merged = conflict.server                                           // the server's record…
            if conflict.base?["title"] == conflict.server["title"] {
                merged.properties["title"] = conflict.client.properties["title"]   // …with our title, if theirs is unchanged
            }
            return merged
        }
        // end snippet
        _ = configuration
    }

    static func events(engine: ChangeSyncEngine) async {
        // snippet: conflicts-events
        for await event in engine.events() {
            switch event {
            case .conflictResolved(let conflict, let chosen):
                print(conflict.client.id, "was at version", conflict.server.metadata.version, "on the server; sent", chosen.properties.keys.sorted())
            case .stopped(let error):
                print("halted:", error)   // an unresolved conflict, say: start() resumes
            default:
                break
            }
        }
        // end snippet
    }

    static func hlc() {
        // snippet: conflicts-hlc
        var clock = HybridLogicalClock(node: "phone")
        let first = clock.stamp(wall: 1_700_000_000_000)
        let second = clock.stamp(wall: 1_699_999_999_000)   // the wall clock went back a second
        print(first < second, second)                        // true 1700000000000-1-phone
        // end snippet
    }

    static func keys(newKey: SymmetricKey, oldKey: SymmetricKey) throws {
        // snippet: conflicts-encryption
        var configuration = ChangeSyncEngine.Configuration(zoneName: "notes")
        configuration.encryption = try RecordEncryption(currentKeyID: "2027-01", keys: ["2027-01": newKey, "2026-11": oldKey])
        // end snippet
        _ = configuration
    }
}
