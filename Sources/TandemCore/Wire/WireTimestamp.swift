import Foundation

/// Timestamps on the wire: ISO 8601 in UTC with milliseconds (`2026-11-22T04:33:00.123Z`), written and
/// read without a formatter, because a snapshot carries two per document.
package enum WireTimestamp {
    /// Milliseconds since 1970, the precision the server stores (rounded to the nearest, so a
    /// millisecond time read back from a `Date` keeps its value).
    package static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    package static func date(milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    package static func format(_ date: Date) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        write(milliseconds: milliseconds(date), to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the 24 bytes of a time given in milliseconds since 1970, without making a `Date`
    /// or a `String`: a store's snapshot writes two per document.
    package static func write(milliseconds millis: Int64, to output: inout [UInt8]) {
        var days = millis >= 0 ? millis / 86_400_000 : (millis - 86_399_999) / 86_400_000
        let msOfDay = millis - days * 86_400_000
        // Days since 1970-01-01 to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)

        let base = output.count
        output.append(contentsOf: repeatElement(0, count: 24))
        func put(_ value: Int64, _ width: Int, at offset: Int) {
            var value = value
            for index in stride(from: base + offset + width - 1, through: base + offset, by: -1) {
                output[index] = UInt8(truncatingIfNeeded: 48 + value % 10)
                value /= 10
            }
        }
        put(year, 4, at: 0); output[base + 4] = 45
        put(month, 2, at: 5); output[base + 7] = 45
        put(day, 2, at: 8); output[base + 10] = 84
        put(msOfDay / 3_600_000, 2, at: 11); output[base + 13] = 58
        put(msOfDay / 60_000 % 60, 2, at: 14); output[base + 16] = 58
        put(msOfDay / 1000 % 60, 2, at: 17); output[base + 19] = 46
        put(msOfDay % 1000, 3, at: 20); output[base + 23] = 90
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z`; nil for anything else.
    package static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z` from UTF-8 bytes; nil for anything else.
    package static func parse(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard bytes.count >= 20, bytes[bytes.count - 1] == 90 else { return nil }
        func number(_ offset: Int, _ width: Int) -> Int64? {
            var value: Int64 = 0
            for index in offset..<(offset + width) {
                let byte = bytes[index]
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard bytes[4] == 45, bytes[7] == 45, bytes[10] == 84 || bytes[10] == 116, bytes[13] == 58, bytes[16] == 58,
              let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var millis: Int64 = 0
        if bytes.count > 20 {
            guard bytes[19] == 46, bytes.count >= 22 else { return nil }
            // Milliseconds from the first three digits; any further ones only have to be digits
            // (read one by one, so no length of them overflows).
            let digits = bytes.count - 21
            guard let fraction = number(20, min(digits, 3)) else { return nil }
            millis = digits >= 3 ? fraction : digits == 2 ? fraction * 10 : fraction * 100
            for index in 23..<max(23, bytes.count - 1) where bytes[index] < 48 || bytes[index] > 57 { return nil }
        } else if bytes.count != 20 {
            return nil
        }
        let days = CivilDate.daysSince1970(year: year, month: month, day: day)
        let total = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
        return date(milliseconds: total)
    }
}

/// Calendar arithmetic without a calendar, for the date formats read by hand.
package enum CivilDate {
    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
    package static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
