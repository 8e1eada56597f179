#!/usr/bin/env python3
"""Documentation coverage of the package's own public declarations.

Reads the symbol graphs `swift package generate-documentation` extracted and counts, for each
library, the public declarations written in this package's Sources/ (inherited and synthesized
members, which have no source location here, do not count) and those with a doc comment. Fails
below the threshold, listing what is undocumented.

    python3 .ci/doc-coverage.py [--minimum 95] [--list]
"""
import argparse, glob, json, os, sys

parser = argparse.ArgumentParser()
parser.add_argument("--minimum", type=float, default=95.0)
parser.add_argument("--list", action="store_true", help="list every undocumented declaration")
arguments = parser.parse_args()

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sources = "file://" + os.path.join(root, "Sources") + "/"
modules = ["TandemCore", "Tandem", "TandemServer", "TandemTesting"]
total = documented = 0
missing = []
for module in modules:
    graphs = glob.glob(os.path.join(root, ".build", "*", "extracted-symbols", "*", module, module + "*.symbols.json"))
    if not graphs:
        sys.exit(f"doc-coverage: no symbol graph for {module}: run generate-documentation first")
    seen = set()
    count = with_docs = 0
    for graph in graphs:
        for symbol in json.load(open(graph))["symbols"]:
            uri = symbol.get("location", {}).get("uri", "")
            if not uri.startswith(sources) or symbol["identifier"]["precise"] in seen:
                continue
            seen.add(symbol["identifier"]["precise"])
            count += 1
            if symbol.get("docComment", {}).get("lines"):
                with_docs += 1
            else:
                line = symbol["location"]["position"]["line"] + 1
                missing.append(f"{uri[len(sources):]}:{line}: {'.'.join(symbol['pathComponents'])}")
    print(f"{module:14} {with_docs:5} of {count:5} public declarations documented ({100 * with_docs / max(count, 1):.1f} %)")
    total += count
    documented += with_docs
share = 100 * documented / max(total, 1)
print(f"{'all':14} {documented:5} of {total:5} ({share:.1f} %), minimum {arguments.minimum:g} %")
if arguments.list or share < arguments.minimum:
    for entry in sorted(missing):
        print("  undocumented: Sources/" + entry)
if share < arguments.minimum:
    sys.exit(1)
