// An app depends on the `Tandem` product and writes `import Tandem`: the values its API takes and
// gives (paths, queries, JSON values, mutations, errors) come with it, as they are TandemCore's.
@_exported import TandemCore
