"""``python -m bench run SUITE [SUITE ...]`` and ``python -m bench list``: bench/suites.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import suites
from bench.results import RESULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the suites")
    run = sub.add_parser("run", help="run suites, each writing its results file")
    run.add_argument("suites", nargs="+", choices=[*suites.SUITES, "all"])
    run.add_argument("--results", type=Path, default=RESULTS, help="default: bench/results")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, fn in suites.SUITES.items():
            print(f"{name}: {(fn.__doc__ or '').strip()}")
        return 0
    names = list(suites.SUITES) if "all" in args.suites else args.suites
    for name in names:
        print(f"results: {suites.run(name, args.results)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
