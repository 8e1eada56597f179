extension Mutation {
    /// A 64-bit digest of what the write does — its path, kind, data, transforms and precondition,
    /// not its id — the same in every process and every Tandem version.
    ///
    /// A server keeps it with each mutation's answer: a later request carrying the same
    /// ``MutationID`` with a different digest reuses the id for another write, and is refused
    /// instead of being answered with the first write's result. Fields and transforms are digested
    /// as unordered sets, so two spellings of one write (keys in another order) agree.
    public var contentDigest: UInt64 {
        var digest = StableDigest()
        digest.string(path.description)
        switch kind {
        case .set(let data):
            digest.byte(1)
            digest.value(.object(data))
        case .merge(let data, let fields):
            digest.byte(2)
            digest.value(.object(data))
            if let fields {
                digest.byte(1)
                digest.unordered(fields) { $0.string($1.description) }
            } else {
                digest.byte(0)
            }
        case .update(let values):
            digest.byte(3)
            digest.unordered(values) { digest, value in
                digest.string(value.field.description)
                digest.value(value.value)
            }
        case .delete:
            digest.byte(4)
        }
        digest.unordered(transforms) { digest, transform in
            digest.string(transform.field.description)
            digest.value(transform.transform.wireValue)
        }
        switch precondition {
        case nil: digest.byte(0)
        case .exists(let exists)?: digest.byte(exists ? 2 : 1)
        case .version(let version)?:
            digest.byte(3)
            digest.uint64(version.rawValue)
        }
        return digest.value
    }
}
