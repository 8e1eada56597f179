import ArgumentParser
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import TandemCore

/// The `--url` and `--token` every client command takes.
struct ServerOptions: ParsableArguments {
    @Option(help: "The Tandem server's URL.")
    var url = "http://127.0.0.1:8080"

    @Option(help: "A bearer token for a server started with --auth-secret (default: $TANDEM_TOKEN; `tandem token` mints one).")
    var token: String?

    /// `--token`, else `TANDEM_TOKEN`.
    var bearerToken: String? {
        token ?? ProcessInfo.processInfo.environment["TANDEM_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    func connection() throws -> ServerConnection {
        guard let base = URL(string: url), let scheme = base.scheme, ["http", "https"].contains(scheme), base.host != nil else {
            throw TandemError.invalidArgument("--url must be an http(s) URL with a host, such as http://127.0.0.1:8080; got '\(url)'.")
        }
        return ServerConnection(base: base, token: bearerToken)
    }
}

/// The server's HTTP API, as the CLI uses it. Error answers become `TandemError`s with their code.
struct ServerConnection: Sendable {
    let base: URL
    var token: String?

    /// Sends a request; one refused over a write rate (`429`, nothing written) is sent again once
    /// its `retryAfter` has passed, up to 16 times.
    func call(_ method: String, _ path: String, body: JSONValue? = nil) async throws -> JSONValue {
        var retries = 0
        while true {
            do {
                return try await callOnce(method, path, body: body)
            } catch let error as TandemError where error.retryAfter != nil && retries < 16 {
                retries += 1
                try await Task.sleep(for: error.retryAfter!)
            }
        }
    }

    private func callOnce(_ method: String, _ path: String, body: JSONValue?) async throws -> JSONValue {
        let text = base.absoluteString.hasSuffix("/") ? String(base.absoluteString.dropLast()) : base.absoluteString
        guard let url = URL(string: text + path) else {
            throw TandemError.invalidArgument("Cannot make a URL from \(text)\(path).")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = Data(JSONText.encode(body).utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw TandemError(.unavailable, "Cannot reach the Tandem server at \(base.absoluteString): \(error.localizedDescription). Is `tandem serve` running there?")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let value = (try? JSONText.parse(bytes: data)) ?? .null
        if status >= 400 {
            if let answer = value[field: "error"] {
                let refusal: TandemError
                do {
                    refusal = try TandemError(wire: answer)
                } catch {
                    throw TandemError(.unknown, "The server answered HTTP \(status) with an error the CLI cannot read (\(error.message)): \(JSONText.encode(answer).prefix(200))")
                }
                throw refusal
            }
            throw TandemError(.unknown, "The server answered HTTP \(status).")
        }
        return value
    }

    /// `/v1/documents/…` with each segment escaped.
    static func documentsPath(_ path: DocumentPath) -> String {
        "/v1/documents/" + path.segments.map { $0.addingPercentEncoding(withAllowedCharacters: .urlPathSegmentAllowed) ?? $0 }.joined(separator: "/")
    }
}

extension CharacterSet {
    static let urlPathSegmentAllowed: CharacterSet = {
        var set = CharacterSet.urlPathAllowed
        set.remove(charactersIn: "/;?#%")
        return set
    }()
}

/// Runs a command body, printing a `TandemError` as `error: code: message` on stderr and exiting 1.
func reportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as TandemError {
        Console.error("error: \(error.code.rawValue): \(error.message)")
        throw ExitCode(1)
    }
}

/// Parses a JSON argument, which must be an object: the argument itself, `-` for standard input,
/// or `@FILE` for a file's contents (bodies too long for a command line).
func parseObjectArgument(_ argument: String, name: String) throws -> JSONValue {
    let text: String
    let source: String
    if argument == "-" {
        text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        source = "\(name) (read from standard input)"
    } else if argument.hasPrefix("@") {
        let file = String(argument.dropFirst())
        guard let data = FileManager.default.contents(atPath: file) else {
            throw TandemError(.notFound, "Cannot read \(name.lowercased()) from '\(file)': no readable file there. Check the path after '@'.")
        }
        text = String(decoding: data, as: UTF8.self)
        source = "\(name) (read from \(file))"
    } else {
        text = argument
        source = name
    }
    let value: JSONValue
    do {
        value = try JSONText.parse(text)
    } catch {
        throw TandemError.invalidArgument("\(source) is not valid JSON (\(error.message)). Quote it for the shell: '{\"name\": \"Ada\"}', or give - (standard input) or @FILE.")
    }
    guard case .object = value else {
        throw TandemError.invalidArgument("\(source) must be a JSON object such as '{\"name\": \"Ada\"}', got \(value.typeName).")
    }
    return value
}
