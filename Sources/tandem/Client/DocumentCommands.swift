import ArgumentParser
import TandemCore

/// `tandem get PATH`.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "get", abstract: "Print one document as JSON.")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The document path, such as users/ada.") var path: String

    func run() async throws {
        try await reportingErrors {
            let path = try DocumentPath(self.path)
            Console.out(JSONText.encode(try await server.connection().call("GET", ServerConnection.documentsPath(path))))
        }
    }
}

/// `tandem set PATH JSON [--merge]`.
struct SetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Replace a document (or merge into it) and print it.",
        discussion: #"Transforms go in place: {"visits": {"$increment": 1}, "seen": {"$serverTimestamp": true}}."#
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The document path.") var path: String
    @Argument(help: "The document body, a JSON object; - reads it from standard input, @FILE from a file.") var json: String
    @Flag(help: "Merge into the existing document instead of replacing it.") var merge = false

    func run() async throws {
        try await reportingErrors {
            let path = try DocumentPath(self.path)
            let body = try parseObjectArgument(json, name: "The document body")
            let query = merge ? "?merge=true" : ""
            Console.out(JSONText.encode(try await server.connection().call("PUT", ServerConnection.documentsPath(path) + query, body: body)))
        }
    }
}

/// `tandem update PATH JSON`.
struct UpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Set fields of an existing document and print it.",
        discussion: #"Keys are dotted field paths: {"address.city": "London", "visits": {"$increment": 1}}."#
    )
    @OptionGroup var server: ServerOptions
    @Argument(help: "The document path.") var path: String
    @Argument(help: "The fields, a JSON object keyed by dotted field path; - reads it from standard input, @FILE from a file.") var json: String

    func run() async throws {
        try await reportingErrors {
            let path = try DocumentPath(self.path)
            let body = try parseObjectArgument(json, name: "The fields")
            Console.out(JSONText.encode(try await server.connection().call("PATCH", ServerConnection.documentsPath(path), body: body)))
        }
    }
}

/// `tandem delete PATH`.
struct DeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a document.")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The document path.") var path: String

    func run() async throws {
        try await reportingErrors {
            let path = try DocumentPath(self.path)
            Console.out(JSONText.encode(try await server.connection().call("DELETE", ServerConnection.documentsPath(path))))
        }
    }
}
