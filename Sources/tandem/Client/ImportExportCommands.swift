import ArgumentParser
import Foundation
import TandemCore

/// `tandem import FILE.jsonl --collection C`.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import documents from a JSON Lines file, one JSON object per line.",
        discussion: """
            A line `tandem export` wrote, {"id": ID, "data": BODY}, is that document exactly. Any \
            other JSON object is a document's body: its "id" field (a string, kept in the body) \
            names the document, and a line without one gets a random id. The whole file is checked \
            before anything is written: a bad line, a non-string id or an id given twice stops the \
            import with its line number. Documents are written in batches of 500.
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
            let (id, body) = try document(in: object, line: index + 1, file: file)
            let path: DocumentPath
            let mutation: Mutation
            do {
                path = try collection.document(id)
                mutation = try Mutation(wire: ["op": "set", "path": .string(path.description), "data": .object(body)])
            } catch {
                throw TandemError.invalidArgument("Line \(index + 1) of \(file): \(error.message) Nothing was imported.")
            }
            if let earlier = lines.updateValue(index + 1, forKey: path) {
                throw TandemError.invalidArgument("Lines \(earlier) and \(index + 1) of \(file) both name the document '\(id)'; the second would replace the first. Nothing was imported.")
            }
            mutations.append(mutation)
        }
        return mutations
    }

    /// A line's document id and body: an exported line's exactly, or a plain body named by its
    /// own "id" field (kept in the body), or by a random id when it has none.
    static func document(in object: JSONObject, line: Int, file: String) throws -> (String, JSONObject) {
        if object.count == 2, case .string(let id)? = object["id"], case .object(let body)? = object["data"] {
            return (id, body)
        }
        switch object["id"] {
        case nil:
            return (UUID().uuidString.lowercased(), object)
        case .string(let id)?:
            return (id, object)
        case let other?:
            throw TandemError.invalidArgument("Line \(line) of \(file) has an \"id\" that is \(other.typeName), not a string, so it names no document. Make it a string, or remove it for a random id. Nothing was imported.")
        }
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
        abstract: "Print a collection as JSON Lines: {\"id\": ID, \"data\": BODY} a document.",
        discussion: "The output imports back exactly (ids, bodies, integers and doubles) with `tandem import FILE --collection C`."
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The collection path.") var collection: String

    func run() async throws {
        try await reportingErrors {
            let collection = try CollectionPath(self.collection)
            let answer = try await server.connection().call("POST", "/v1/query", body: ListenTarget.collection(collection, Query()).wireValue)
            for document in answer[field: "documents"]?.arrayValue ?? [] {
                guard let data = document[field: "data"], let text = document[field: "path"]?.stringValue, let path = DocumentPath(trusted: text) else {
                    throw TandemError(.dataLoss, "The server answered a document without a path or a body: \(JSONText.encode(document).prefix(200)). Nothing more was exported.")
                }
                Console.out(JSONText.encode(.object(["id": .string(path.id), "data": data])))
            }
        }
    }
}
