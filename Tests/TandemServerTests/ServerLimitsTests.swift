import Testing
import TandemCore
import TandemServer

@Suite("Server limits")
struct ServerLimitsTests {
    let path = try! DocumentPath("docs/big")

    @Test("a document over the size limit is resource-exhausted; at the limit it passes")
    func documentSize() throws {
        var limits = ServerLimits()
        #expect(limits.maximumDocumentBytes == 1_048_576)
        limits.maximumDocumentBytes = 20
        try limits.checkDocument(["a": "1234567890"], at: path)  // {"a":"1234567890"} is 18 bytes
        do {
            try limits.checkDocument(["a": "12345678901234"], at: path)
            Issue.record("expected resource-exhausted")
        } catch {
            #expect(error.code == .resourceExhausted)
            #expect(error.message.contains("docs/big"))
        }
    }

    @Test("a batch over 500 writes is resource-exhausted")
    func batchSize() throws {
        let limits = ServerLimits()
        let write = Mutation.set(path, [:])
        try limits.checkBatch(Array(repeating: write, count: 500))
        #expect(throws: TandemError.self) { try limits.checkBatch(Array(repeating: write, count: 501)) }
    }
}
