import Foundation

/// What went wrong with a file, in a few words a person can act on: the operating system's own
/// reason ("No such file or directory", "Permission denied", "File exists") rather than
/// Foundation's dump of an error's domain, code and user info, or its sentence that ends in "..".
package func describeFileError(_ error: any Error) -> String {
    let error = error as NSError
    if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
        return underlying.localizedDescription
    }
    var text = error.localizedDescription
    let filler = "The operation could not be completed. "
    if text.hasPrefix(filler) { text.removeFirst(filler.count) }
    while text.hasSuffix(".") { text.removeLast() }
    return text
}
