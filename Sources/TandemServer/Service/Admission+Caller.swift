extension Admission {
    /// Whom a quota counts against: a signed-in user, or an anonymous caller's address.
    ///
    /// An anonymous caller counts as the addresses it can pick from at will
    /// (``anonymous(from:)``): an IPv4 address on its own, an IPv6 address by its /64 prefix.
    /// One host, or one home, gets a whole /64 and may use a new address of it for every request,
    /// so counting IPv6 addresses one by one would give it 2⁶⁴ buckets.
    enum Caller: Hashable, Sendable, CustomStringConvertible {
        case user(String)
        /// An IPv4 address (`203.0.113.7`), or an IPv6 /64 prefix (`2001:db8:0:1::/64`).
        case address(String)

        var description: String {
            switch self {
            case .user(let uid): "The user \(uid)"
            case .address(let address) where address.hasSuffix("/64"): "The addresses \(address)"
            case .address(let address): "The address \(address)"
            }
        }

        /// Whom an anonymous caller from `address` (as the socket gives it) counts as: an IPv4
        /// address as it is, an IPv6 address by its /64 prefix, an IPv4-mapped IPv6 address
        /// (`::ffff:203.0.113.7`) as its IPv4 address. Text that is no IP address is kept as it is.
        static func anonymous(from address: String) -> Caller {
            .address(group(of: address))
        }

        /// The text ``anonymous(from:)`` counts `address` by.
        static func group(of address: String) -> String {
            guard let bytes = ipv6Bytes(address) else { return address }
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
                return bytes[12..<16].map { String($0) }.joined(separator: ".")
            }
            // The first four groups, the /64, in lowercase hex without leading zeros.
            let groups = stride(from: 0, to: 8, by: 2).map { index -> String in
                let group = UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1])
                return String(group, radix: 16)
            }
            return groups.joined(separator: ":") + "::/64"
        }

        /// The 16 bytes of an IPv6 address in text (RFC 4291 §2.2: hex groups, one `::`, an IPv4
        /// address at the end), in brackets or not, a zone (`%eth0`) ignored; nil for anything
        /// else, an IPv4 address included.
        private static func ipv6Bytes(_ text: String) -> [UInt8]? {
            let colon = UInt8(ascii: ":")
            var utf8 = Array(text.utf8)
            if utf8.first == UInt8(ascii: "["), utf8.last == UInt8(ascii: "]") { utf8 = Array(utf8.dropFirst().dropLast()) }
            if let zone = utf8.firstIndex(of: UInt8(ascii: "%")) { utf8.removeSubrange(zone...) }
            guard utf8.contains(colon) else { return nil }
            var fields = utf8.split(separator: colon, omittingEmptySubsequences: false)
            // A `::` at either end splits into two empty fields: keep one, standing for the gap.
            // A single `:` there is malformed.
            if fields.count >= 2, fields[0].isEmpty {
                guard fields[1].isEmpty else { return nil }
                fields.removeFirst()
            }
            if fields.count >= 2, fields[fields.count - 1].isEmpty {
                guard fields[fields.count - 2].isEmpty else { return nil }
                fields.removeLast()
            }
            var groups: [UInt16] = []
            var gap: Int?
            for (position, field) in fields.enumerated() {
                if field.isEmpty {
                    // At most one `::`.
                    guard gap == nil else { return nil }
                    gap = groups.count
                } else if position == fields.count - 1, field.contains(UInt8(ascii: ".")) {
                    guard let ipv4 = ipv4Bytes(field) else { return nil }
                    groups.append(UInt16(ipv4[0]) << 8 | UInt16(ipv4[1]))
                    groups.append(UInt16(ipv4[2]) << 8 | UInt16(ipv4[3]))
                } else {
                    guard let group = hexGroup(field) else { return nil }
                    groups.append(group)
                }
            }
            if let gap {
                // `::` stands for one group of zeros or more.
                guard groups.count < 8 else { return nil }
                groups.insert(contentsOf: repeatElement(0, count: 8 - groups.count), at: gap)
            } else {
                guard groups.count == 8 else { return nil }
            }
            return groups.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
        }

        /// One to four hex digits.
        private static func hexGroup(_ field: ArraySlice<UInt8>) -> UInt16? {
            guard (1...4).contains(field.count) else { return nil }
            var value: UInt16 = 0
            for byte in field {
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt16(digit)
            }
            return value
        }

        /// Four decimal numbers of at most 255, separated by dots.
        private static func ipv4Bytes(_ field: ArraySlice<UInt8>) -> [UInt8]? {
            let parts = field.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            guard parts.count == 4 else { return nil }
            var bytes: [UInt8] = []
            for part in parts {
                guard (1...3).contains(part.count) else { return nil }
                var value = 0
                for byte in part {
                    guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                    value = value * 10 + Int(byte - UInt8(ascii: "0"))
                }
                guard value <= 255 else { return nil }
                bytes.append(UInt8(value))
            }
            return bytes
        }
    }
}
