"""``python -m bench list | run SUITE [SUITE ...] | docs``: the named suites (bench/suites.py)
and docs/BENCHMARKS.md, generated from their newest results (bench/benchmarks_doc.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import benchmarks_doc, suites
from bench.results import RESULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="each suite: its time limit, results file and what it runs")
    run = sub.add_parser("run", help="run suites, each writing its results file")
    run.add_argument("suites", nargs="+", choices=[*suites.SUITES, "all"])
    run.add_argument("--results", type=Path, default=RESULTS, help="default: bench/results")
    docs = sub.add_parser("docs", help="write docs/BENCHMARKS.md from the newest results")
    docs.add_argument("--results", type=Path, default=RESULTS, help="default: bench/results")
    docs.add_argument("--out", type=Path, default=benchmarks_doc.DOC)
    docs.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(suites.listing()))
        return 0
    if args.command == "docs":
        text = benchmarks_doc.build(args.results)
        if args.check:
            stale = not args.out.is_file() or args.out.read_text() != text
            print(f"{args.out}: {'stale: run python -m bench docs' if stale else 'current'}")
            return 1 if stale else 0
        args.out.write_text(text)
        print(f"wrote {args.out}")
        return 0
    names = list(suites.SUITES) if "all" in args.suites else args.suites
    for name in names:
        print(f"results: {suites.run(name, args.results)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
