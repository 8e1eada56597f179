// swift-tools-version:6.1
import PackageDescription

// Every target builds in Swift 6 mode with existential `any` spelled out.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Tandem",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "TandemCore", targets: ["TandemCore"]),
        .library(name: "Tandem", targets: ["Tandem"]),
        .library(name: "TandemServer", targets: ["TandemServer"]),
        .library(name: "TandemPostgres", targets: ["TandemPostgres"]),
        .library(name: "TandemTesting", targets: ["TandemTesting"]),
        .executable(name: "tandem", targets: ["tandem"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        // No traits: with the defaults, alternating `swift build` and `swift test` rebuilds Hummingbird.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // HS256 bearer tokens (`--auth-secret`).
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        // Rules files (`--rules`), YAML or JSON, with line and column for every error.
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        // TLS (`--tls-cert`, `--tls-key`, wss:// and https:// on the client).
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Tests make their own certificates.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"6.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        // Synced state's collection value (`IdentifiedArrayOf`).
        .package(url: "https://github.com/pointfreeco/swift-identified-collections.git", from: "1.1.1"),
        // The PostgreSQL store (`tandem serve --postgres`).
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // Metrics: swift-metrics' API, kept and written in Prometheus' text format.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // `swift package generate-documentation`: the DocC catalogs. The URL OpenAPIKit names too.
        .package(url: "https://github.com/apple/swift-docc-plugin", from: "1.5.0"),
        // Tests check the HTTP API's OpenAPI description is valid OpenAPI 3.1 (no external loading).
        .package(url: "https://github.com/mattpolzin/OpenAPIKit.git", from: "6.4.0", traits: []),
    ],
    targets: [
        // Values, paths, queries, patches, mutations, wire messages, errors. No I/O.
        .target(
            name: "TandemCore",
            swiftSettings: swiftSettings
        ),
        // The client library users import.
        .target(
            name: "Tandem",
            dependencies: [
                "TandemCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, for the cache's bulk document writes.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "IdentifiedCollections", package: "swift-identified-collections"),
                // Encrypted record properties (`ChangeSyncEngine`): AES-GCM.
                .product(name: "Crypto", package: "swift-crypto"),
                // Client metrics (`ClientMetrics`), off unless the app sets them.
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // The sync server.
        .target(
            name: "TandemServer",
            dependencies: [
                "TandemCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, for the statements every write runs.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                // The HTTP decoder's parts and errors, for the connection guard.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // WebSocket frames, written by each session straight onto its channel.
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Yams", package: "Yams"),
            ],
            // The web console's pages (`/console`).
            resources: [.copy("Console")],
            swiftSettings: swiftSettings
        ),
        // The server store on PostgreSQL, shared by several `tandem serve` nodes.
        .target(
            name: "TandemPostgres",
            dependencies: [
                "TandemCore",
                "TandemServer",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Test support shipped to users: mocks, manual clock, in-memory server.
        .target(
            name: "TandemTesting",
            dependencies: ["Tandem", "TandemServer"],
            swiftSettings: swiftSettings
        ),
        // The `tandem` command line.
        .executableTarget(
            name: "tandem",
            dependencies: [
                "TandemCore",
                "Tandem",
                "TandemServer",
                "TandemPostgres",
                "TandemTesting",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "IdentifiedCollections", package: "swift-identified-collections"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // A child process for the crash test: it writes through an engine and is killed mid-way.
        .executableTarget(
            name: "CrashWriter",
            dependencies: ["Tandem", "TandemTesting", .product(name: "IdentifiedCollections", package: "swift-identified-collections")],
            path: "Tests/CrashWriter",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TandemCoreTests",
            dependencies: ["TandemCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TandemServerTests",
            dependencies: [
                "TandemServer",
                "TandemTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            ],
            swiftSettings: swiftSettings
        ),
        // The real server and client over real sockets on 127.0.0.1, and the CLI; the PostgreSQL
        // store and several nodes against a private cluster the tests start.
        .testTarget(
            name: "TandemIntegrationTests",
            dependencies: [
                .product(name: "IdentifiedCollections", package: "swift-identified-collections"),
                "Tandem",
                "TandemServer",
                "TandemPostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                "TandemTesting",
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                // Tokens signed as identity providers sign them (RS256, ES256), with keys the tests make.
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                // The README's change-sync example keeps its notes in a GRDB table.
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TandemTests",
            dependencies: [
                .product(name: "IdentifiedCollections", package: "swift-identified-collections"),
                "Tandem",
                "TandemTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
