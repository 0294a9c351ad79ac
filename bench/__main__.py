"""``python -m bench list | run SUITE [SUITE ...] [--within S] | docs``: the named suites
(bench/suites.py) and docs/BENCHMARKS.md, generated from their newest results
(bench/benchmarks_doc.py). ``--within``: the seconds a machine gives all of them (one command
of a machine that stops commands at a limit); a suite whose limit no longer fits in what is
left is not started, and said so, rather than cut mid-way with its results lost."""

from __future__ import annotations

import argparse
import sys
import time
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
    run.add_argument("--within", type=float, help="seconds for them all; see above")
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
    deadline = None if args.within is None else time.monotonic() + args.within
    not_started = []
    for name in names:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and suites.SUITES[name].limit_s > left:
            print(f"not started: {name} (limit {suites.SUITES[name].limit_s} s, {left:.0f} s left)")
            not_started.append(name)
            continue
        print(f"results: {suites.run(name, args.results)}", flush=True)
    return 3 if not_started else 0


if __name__ == "__main__":
    sys.exit(main())
