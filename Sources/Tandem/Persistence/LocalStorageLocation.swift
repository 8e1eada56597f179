import Foundation

/// Where Tandem keeps local data by default, and how a manager key becomes a file name.
public enum LocalStorageLocation {
    /// `$XDG_DATA_HOME/tandem`, else `~/.local/share/tandem`; the Application Support folder on Apple
    /// platforms.
    public static var defaultDirectory: URL {
        #if canImport(Darwin)
        let base = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
            ?? URL(fileURLWithPath: NSHomeDirectory()).appendingPathComponent("Library/Application Support")
        return base.appendingPathComponent("tandem", isDirectory: true)
        #else
        if let xdg = ProcessInfo.processInfo.environment["XDG_DATA_HOME"], !xdg.isEmpty {
            return URL(fileURLWithPath: xdg, isDirectory: true).appendingPathComponent("tandem", isDirectory: true)
        }
        return URL(fileURLWithPath: NSHomeDirectory(), isDirectory: true)
            .appendingPathComponent(".local/share/tandem", isDirectory: true)
        #endif
    }

    /// A file-name-safe form of a manager key: letters, digits, `-`, `_` and `.` stay; every other
    /// byte becomes `%XX`, so distinct keys never share a file.
    static func fileName(for key: String) -> String {
        var name = ""
        for byte in key.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                name.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: ".") where !name.isEmpty:
                name.append(".")
            default:
                let hex = String(byte, radix: 16, uppercase: true)
                name += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return name.isEmpty ? "%" : name
    }
}
