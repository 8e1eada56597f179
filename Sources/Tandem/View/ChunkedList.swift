/// An ordered list kept as a sequence of short arrays, so that a copy shared with readers costs
/// little to change: a change copies the list of chunks (one reference per few hundred elements)
/// and the one chunk it touches, where a flat array shared with a reader would be copied whole.
///
/// This is what lets an engine publish its state to readers after every change (the published
/// value shares the chunks) while a single change stays O(chunk + n / chunk) instead of O(n).
/// Reading an element by position costs a binary search over the chunks; iterating goes chunk by
/// chunk.
struct ChunkedList<Element> {
    /// The longest chunk for plain values, and for the others.
    static var chunkSize: Int { _isPOD(Element.self) ? 2_048 : 256 }

    /// How long a chunk of a list of `count` elements grows (up to twice this before it splits in
    /// two). A change of a list shared with a reader copies the list of chunks (a reference each,
    /// retained) and one chunk (each element retained, unless a plain value): the two costs are
    /// about even when a chunk holds about the square root of the count, so a short list (an
    /// outbox, a small collection) keeps short chunks, from 32, and a long one chunks of up to
    /// ``chunkSize``. Plain values such as revisions copy as bytes: their chunks are always long.
    /// Chunks made while the list was shorter stay as they are until a change splits or joins them.
    static func chunkSize(for count: Int) -> Int {
        if _isPOD(Element.self) { return chunkSize }
        var size = 32
        while size < chunkSize && size * size < count { size *= 2 }
        return size
    }

    /// The elements, in order. Never holds an empty chunk.
    private(set) var chunks: [[Element]] = []
    /// `ends[i]`: how many elements chunks `0...i` hold together.
    private var ends: [Int] = []
    /// Whether the list is one adopted array, not yet cut into chunks.
    private var isAdopted = false

    init() {}

    /// A list of `elements` that shares their storage, made in constant time: for a list made
    /// whole (a cache loaded at start) and read whole before it changes. Its first change cuts it
    /// into chunks, which costs one copy.
    init(adopting elements: [Element]) {
        guard !elements.isEmpty else { return }
        chunks = [elements]
        ends = [elements.count]
        isAdopted = elements.count > 2 * Self.chunkSize(for: elements.count)
    }

    /// Before a change: an adopted array is cut into chunks.
    private mutating func cutIfAdopted() {
        guard isAdopted else { return }
        self = ChunkedList(chunks[0])
    }

    init(_ elements: some Sequence<Element>) {
        let size = Self.chunkSize(for: elements.underestimatedCount)
        var chunk: [Element] = []
        chunk.reserveCapacity(size)
        for element in elements {
            chunk.append(element)
            if chunk.count == size {
                appendChunk(chunk)
                chunk = []
                chunk.reserveCapacity(size)
            }
        }
        if !chunk.isEmpty { appendChunk(chunk) }
    }

    private mutating func appendChunk(_ chunk: [Element]) {
        ends.append((ends.last ?? 0) + chunk.count)
        chunks.append(chunk)
    }

    /// The chunk holding `index` (for `index == count`, the last chunk) and the index in it.
    private func locate(_ index: Int) -> (chunk: Int, offset: Int) {
        var low = 0
        var high = ends.count - 1
        while low < high {
            let middle = (low + high) / 2
            if ends[middle] > index { high = middle } else { low = middle + 1 }
        }
        return (low, index - (low == 0 ? 0 : ends[low - 1]))
    }

    /// Every element in one array. Shares the storage when the list is a single chunk.
    var array: [Element] {
        if chunks.count == 1 { return chunks[0] }
        var result: [Element] = []
        result.reserveCapacity(count)
        for chunk in chunks { result.append(contentsOf: chunk) }
        return result
    }

    /// The elements in `range`, in one array.
    func elements(in range: Range<Int>) -> [Element] {
        if range == 0..<count { return array }
        var result: [Element] = []
        result.reserveCapacity(range.count)
        guard !range.isEmpty else { return result }
        var (chunk, offset) = locate(range.lowerBound)
        var left = range.count
        while left > 0 {
            let take = Swift.min(left, chunks[chunk].count - offset)
            result.append(contentsOf: chunks[chunk][offset..<(offset + take)])
            left -= take
            chunk += 1
            offset = 0
        }
        return result
    }

    mutating func append(_ element: Element) {
        cutIfAdopted()
        let size = Self.chunkSize(for: count + 1)
        if let last = chunks.indices.last, chunks[last].count < size {
            chunks[last].append(element)
            ends[last] += 1
        } else {
            var chunk: [Element] = []
            chunk.reserveCapacity(size)
            chunk.append(element)
            appendChunk(chunk)
        }
    }

    mutating func insert(_ element: Element, at index: Int) {
        precondition(index >= 0 && index <= count, "ChunkedList index out of range")
        cutIfAdopted()
        if chunks.isEmpty || index == count {
            append(element)
            return
        }
        let (chunk, offset) = locate(index)
        chunks[chunk].insert(element, at: offset)
        for later in chunk..<ends.count { ends[later] += 1 }
        if chunks[chunk].count >= 2 * Self.chunkSize(for: count) {
            // Split in two halves, so later inserts here move half as much.
            let half = chunks[chunk].count / 2
            let tail = Array(chunks[chunk][half...])
            chunks[chunk].removeSubrange(half...)
            chunks.insert(tail, at: chunk + 1)
            ends.insert(ends[chunk], at: chunk + 1)
            ends[chunk] -= tail.count
        }
    }

    @discardableResult
    mutating func remove(at index: Int) -> Element {
        precondition(index >= 0 && index < count, "ChunkedList index out of range")
        cutIfAdopted()
        let (chunk, offset) = locate(index)
        let element = chunks[chunk].remove(at: offset)
        for later in chunk..<ends.count { ends[later] -= 1 }
        if chunks[chunk].isEmpty {
            chunks.remove(at: chunk)
            ends.remove(at: chunk)
        } else if chunk + 1 < chunks.count, chunks[chunk].count + chunks[chunk + 1].count <= Self.chunkSize(for: count) {
            // Two small neighbours become one, so removals never leave a trail of tiny chunks.
            let next = chunks.remove(at: chunk + 1)
            chunks[chunk].append(contentsOf: next)
            ends.remove(at: chunk)
        }
        return element
    }

    /// Whether this list and `other` share their storage, so hold the same elements: a list is
    /// never changed in place while another value shares it.
    func sharesStorage(with other: ChunkedList) -> Bool {
        chunks.withUnsafeBufferPointer { mine in
            other.chunks.withUnsafeBufferPointer { theirs in mine.baseAddress == theirs.baseAddress && mine.count == theirs.count }
        }
    }

    /// The indices at which this list and `older` hold elements that `differ`, or nil when they
    /// hold different counts. Chunks at the same place that share storage hold the same elements
    /// and are skipped: between two versions of a list a few changes apart, this costs a pass over
    /// the chunks and over the elements of the chunks that changed.
    func differingIndices(from older: ChunkedList, where differ: (Element, Element) -> Bool) -> [Int]? {
        guard count == older.count else { return nil }
        var indices: [Int] = []
        guard ends == older.ends else {
            // Cut differently (one of them adopted whole, or a chunk split): element by element.
            for (index, (mine, theirs)) in zip(self, older).enumerated() where differ(mine, theirs) { indices.append(index) }
            return indices
        }
        var start = 0
        for (mine, theirs) in zip(chunks, older.chunks) {
            let shared = mine.withUnsafeBufferPointer { a in theirs.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
            if !shared {
                for offset in mine.indices where differ(mine[offset], theirs[offset]) { indices.append(start + offset) }
            }
            start += mine.count
        }
        return indices
    }

    mutating func removeAll() {
        chunks.removeAll()
        ends.removeAll()
        isAdopted = false
    }

    /// The first index whose element does not come before the one sought (`isBefore` says which
    /// elements do): a binary search over a list sorted by `isBefore`.
    func partitionIndex(where isBefore: (Element) -> Bool) -> Int {
        guard !chunks.isEmpty else { return 0 }
        // First the chunk, by its last element; then the place in it.
        var low = 0
        var high = chunks.count
        while low < high {
            let middle = (low + high) / 2
            if isBefore(chunks[middle][chunks[middle].count - 1]) { low = middle + 1 } else { high = middle }
        }
        guard low < chunks.count else { return count }
        let chunk = chunks[low]
        var first = 0
        var last = chunk.count
        while first < last {
            let middle = (first + last) / 2
            if isBefore(chunk[middle]) { first = middle + 1 } else { last = middle }
        }
        return (low == 0 ? 0 : ends[low - 1]) + first
    }
}

extension ChunkedList: RandomAccessCollection, MutableCollection {
    var startIndex: Int { 0 }
    var endIndex: Int { ends.last ?? 0 }

    subscript(position: Int) -> Element {
        get {
            let (chunk, offset) = locate(position)
            return chunks[chunk][offset]
        }
        set {
            cutIfAdopted()
            let (chunk, offset) = locate(position)
            chunks[chunk][offset] = newValue
        }
    }

    func makeIterator() -> Iterator { Iterator(chunks: chunks) }

    /// Walks chunk by chunk, without a search per element.
    struct Iterator: IteratorProtocol {
        let chunks: [[Element]]
        var chunk = 0
        var offset = 0

        mutating func next() -> Element? {
            while chunk < chunks.count {
                if offset < chunks[chunk].count {
                    defer { offset += 1 }
                    return chunks[chunk][offset]
                }
                chunk += 1
                offset = 0
            }
            return nil
        }
    }
}

extension ChunkedList: Sendable where Element: Sendable {}
extension ChunkedList.Iterator: Sendable where Element: Sendable {}

extension ChunkedList: ExpressibleByArrayLiteral {
    init(arrayLiteral elements: Element...) {
        self.init(elements)
    }
}
