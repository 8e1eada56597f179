import ArgumentParser
import Foundation
import TandemCore

/// `tandem import FILE.jsonl --collection C`.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import documents from a JSON Lines file, one JSON object per line.",
        discussion: """
            A line's "id" field (a string) names its document; lines without one get a random id. \
            The whole file is checked before anything is written: a bad line stops the import with \
            its line number. Documents are written in batches of 500.
            """
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The .jsonl file.") var file: String
    @Option(help: "The collection to import into.") var collection: String

    func run() async throws {
        try await reportingErrors {
            let collection = try CollectionPath(self.collection)
            let mutations = try Self.read(file, into: collection)
            let connection = try server.connection()
            let started = ContinuousClock.now
            let terminal = Console.isTerminal
            var written = 0
            for start in stride(from: 0, to: mutations.count, by: 500) {
                let batch = Array(mutations[start..<min(start + 500, mutations.count)])
                do {
                    _ = try await connection.call("POST", "/v1/commit", body: ["writes": .array(batch.map(\.wireValue))])
                } catch let error as TandemError {
                    throw TandemError(error.code, "\(error.message) (\(written) of \(mutations.count) documents were imported before this batch; lines \(start + 1)–\(start + batch.count) were not.)")
                }
                written += batch.count
                if terminal { Self.progress(written, of: mutations.count) }
            }
            if terminal { FileHandle.standardOutput.write(Data("\n".utf8)) }
            let elapsed = (ContinuousClock.now - started).doubleSeconds
            Console.out("imported \(written) documents into \(collection) in \(String(format: "%.2f", elapsed)) s")
        }
    }

    static func read(_ file: String, into collection: CollectionPath) throws -> [Mutation] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            throw TandemError(.notFound, "Cannot read \(file): \(describeFileError(error)). Check the path.")
        }
        var mutations: [Mutation] = []
        // The line each document came from, to refuse one given twice. Keyed by path, which
        // compares bytes: Swift's strings call `é` precomposed and decomposed one id, two documents.
        var lines: [DocumentPath: Int] = [:]
        for (index, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            if text.isEmpty { continue }
            let value: JSONValue
            do {
                value = try JSONText.parse(text)
            } catch {
                throw TandemError.invalidArgument("Line \(index + 1) of \(file) is not valid JSON: \(error.message) Nothing was imported.")
            }
            guard case .object(let object) = value else {
                throw TandemError.invalidArgument("Line \(index + 1) of \(file) is \(value.typeName), not a JSON object. Nothing was imported.")
            }
            let id = object["id"]?.stringValue ?? UUID().uuidString.lowercased()
            do {
                mutations.append(try Mutation(wire: ["op": "set", "path": .string(try collection.document(id).description), "data": value]))
            } catch {
                throw TandemError.invalidArgument("Line \(index + 1) of \(file): \(error.message) Nothing was imported.")
            }
        }
        return mutations
    }

    static func progress(_ done: Int, of total: Int) {
        let width = 30
        let filled = total == 0 ? width : done * width / total
        let bar = String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
        FileHandle.standardOutput.write(Data("\r[\(bar)] \(done)/\(total)".utf8))
    }
}

/// `tandem export COLLECTION`.
struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Print a collection as JSON Lines: each document's body, with its id in \"id\".",
        discussion: "The output imports back with `tandem import FILE --collection C`."
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The collection path.") var collection: String

    func run() async throws {
        try await reportingErrors {
            let collection = try CollectionPath(self.collection)
            let answer = try await server.connection().call("POST", "/v1/query", body: ListenTarget.collection(collection, Query()).wireValue)
            for document in answer[field: "documents"]?.arrayValue ?? [] {
                guard var data = document[field: "data"]?.objectValue, let path = document[field: "path"]?.stringValue else { continue }
                if data["id"] == nil { data["id"] = .string(String(path.split(separator: "/").last ?? "")) }
                Console.out(JSONText.encode(data))
            }
        }
    }
}
