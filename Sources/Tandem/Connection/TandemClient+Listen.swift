import TandemCore

extension TandemClient {
    /// Listens to a document or a query: a snapshot first, then each commit that changes it, never half
    /// of one. With `resumeFrom`, only what changed after that version comes (or a new snapshot when
    /// the server no longer keeps that history).
    ///
    /// By default the stream outlives disconnections: the client resumes it from the last version it
    /// delivered, so nothing is missed and nothing comes twice. With `failWhenDisconnected`, it ends
    /// with `unavailable` instead (engines use this to run their own retry and show the cache).
    /// An error the server sends for the listener ends it. Dropping the stream stops the listener.
    public func listen(_ target: ListenTarget, resumeFrom: Version? = nil, failWhenDisconnected: Bool = false) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        listen(target, resumeFrom: resumeFrom, failWhenDisconnected: failWhenDisconnected, inPieces: false)
    }

    /// Tells of the commits in a whole document, collection or collection group (a target with no
    /// filters, order or limit) by their version only, without their changes: each batch is empty
    /// and carries the version of the last commit it tells of, the first one the version the
    /// listener starts at (after `resumeFrom`, if anything changed since). For a client that reads
    /// what changed itself, from a change feed (``changes(_:since:limit:fromStart:)``): nothing is sent twice.
    /// Resumes by itself across reconnects.
    public func notifications(of target: ListenTarget, resumeFrom: Version? = nil) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        listen(target, resumeFrom: resumeFrom, failWhenDisconnected: false, inPieces: false, notify: true)
    }

    /// As above; with `inPieces` (and `failWhenDisconnected`), a batch the server sends in several
    /// frames arrives as pieces that `continue`, each as soon as its frame is read.
    func listen(_ target: ListenTarget, resumeFrom: Version?, failWhenDisconnected: Bool, inPieces: Bool, notify: Bool = false) -> AsyncThrowingStream<RemoteChangeBatch, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: RemoteChangeBatch.self)
        let (id, failNow, wake) = state.withLock { state -> (Int, Bool, CheckedContinuation<Void, Never>?) in
            let id = state.nextRequestID
            state.nextRequestID += 1
            let connected = state.machine.isConnected
            // While an attempt is under way, the listen waits for it (and fails with it).
            if failWhenDisconnected && !connected && !state.machine.isConnecting {
                return (id, true, Self.requestWake(&state))
            }
            var listener = Listener(target: target, lastVersion: resumeFrom, failWhenDisconnected: failWhenDisconnected, continuation: continuation,
                                    inPieces: inPieces && failWhenDisconnected, notify: notify)
            if connected, let connection = state.connection {
                connection.frames.yield(ClientMessage.listen(id: id, target: target, resumeFrom: resumeFrom, notify: notify).text)
                listener.sent = true
            }
            state.listeners[id] = listener
            return (id, false, connected ? nil : Self.requestWake(&state))
        }
        wake?.resume()
        if failNow {
            continuation.finish(throwing: TandemError(.unavailable, "Not connected to the Tandem server at \(url.absoluteString); retrying in the background."))
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in
                guard state.listeners.removeValue(forKey: id) != nil else { return }
                if state.machine.isConnected {
                    state.connection?.frames.yield(ClientMessage.unlisten(id: id).text)
                }
            }
        }
        return stream
    }
}
