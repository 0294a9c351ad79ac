"""``nsight-agent``: the same engine for people, on the same service layer as the MCP server.

Commands: profile, compare, diagnose, report, metrics, skills, runs, doctor, serve, demo.
Exit codes: 0 ok, 1 failure (the work could not be done: no ncu, a broken kernel, ...), 2 usage
(bad arguments, an unknown metric, a file that is not a report).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from nsight_agent import __version__
from nsight_agent.cli import commands
from nsight_agent.cli.commands import parse_config, parse_configs
from nsight_agent.errors import (
    ExtractionError,
    InvalidRequestError,
    NsightAgentError,
    UnknownMetricError,
)
from nsight_agent.request import validation_text

HELP = argparse.HelpFormatter


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option with a default says it in --help, described or not."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)
            continue
        if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            continue
        if "%(default)" not in (action.help or ""):
            action.help = f"{action.help or ''} (default: %(default)s)".strip()


__all__ = ["build_parser", "main", "parse_config", "parse_configs"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nsight-agent",
        description="Nsight Compute profiling for kernel engineers and their coding agents. "
        "Exit codes: 0 ok, 1 failure, 2 usage error.",
        formatter_class=HELP,
    )
    parser.add_argument("--version", action="version", version=f"nsight-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, formatter_class=HELP, **kwargs)

    p = add("profile", help="profile a kernel source file over configs (needs ncu)")
    p.add_argument("file", help="Python source with setup() and the entry function")
    p.add_argument(
        "--config",
        nargs="+",
        action="append",
        metavar="KEY=VALUE",
        help="one config (repeat for more), e.g. --config M=1024 N=512",
    )
    p.add_argument("--grid", help='JSON grid: {"M": [1024, 2048]} or a list of objects')
    p.add_argument(
        "--language", choices=["triton", "torch", "torch_compile", "cuda"], default="triton"
    )
    p.add_argument("--entry", default="run", help="function that launches the kernel")
    p.add_argument("--metrics", action="append", help="metric names (comma-separated or repeated)")
    p.add_argument("--skill", help="a curated metric bundle (see the list_skills tool)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--timeout", type=int, default=600, help="seconds")
    p.add_argument("--clock-control", choices=["base", "none"], default="none")
    p.add_argument("--json", action="store_true", help="print the compact JSON answer")
    p.add_argument(
        "--method", choices=["ncu", "timing"], default="ncu", help="timing: CUDA events, no ncu"
    )
    p.set_defaults(func=commands.cmd_profile)

    p = add("report", help="summarize an existing .ncu-rep (no GPU needed)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--findings", type=int, default=3, help="ncu findings per kernel")
    p.add_argument("--metrics", action="append", help="extra metrics to show when present")
    p.set_defaults(func=commands.cmd_report)

    p = add("diagnose", help="why a kernel is slow: a .ncu-rep, a source file (needs ncu) or a run")
    p.add_argument("file", nargs="?", help=".ncu-rep to read, or kernel source to profile")
    p.add_argument("--run-id", help="diagnose an earlier run instead")
    p.add_argument("--config", nargs="+", action="append", metavar="KEY=VALUE")
    p.add_argument("--grid", help='JSON grid: {"M": [1024, 2048]}')
    p.add_argument(
        "--language", choices=["triton", "torch", "torch_compile", "cuda"], default="triton"
    )
    p.add_argument("--entry", default="run")
    p.add_argument("--timeout", type=int, default=900, help="seconds")
    p.add_argument("--no-deep", action="store_true", help="first pass only (one ncu run)")
    p.add_argument("--ideal-bytes", type=float, help="bytes one kernel must move")
    p.add_argument("--input-dtype", action="append", help="e.g. bfloat16 (repeatable)")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--limit", type=int, default=3, help="kernels diagnosed in full")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=commands.cmd_diagnose)

    p = add("compare", help="time variants of a kernel against a baseline (needs ncu)")
    p.add_argument("file", help="Python source defining setup() and the variants' entries")
    p.add_argument(
        "--variant", action="append", metavar="NAME[=ENTRY]", help="a variant (at least two)"
    )
    p.add_argument("--baseline", help="variant the others are compared to (default: the first)")
    p.add_argument("--config", nargs="+", action="append", metavar="KEY=VALUE")
    p.add_argument("--grid", help='JSON grid: {"M": [1024, 2048]}')
    p.add_argument(
        "--language", choices=["triton", "torch", "torch_compile", "cuda"], default="triton"
    )
    p.add_argument("--runs", type=int, default=10, help="measured runs per config")
    p.add_argument("--timeout", type=int, default=600, help="seconds")
    p.add_argument("--clock-control", choices=["base", "none"], default="none")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--method", choices=["ncu", "timing"], default="ncu", help="timing: CUDA events, no ncu"
    )
    p.set_defaults(func=commands.cmd_compare)

    p = add("metrics", help="search ncu metric names and descriptions (no GPU needed)")
    p.add_argument("query", nargs="+", help="words or a metric name, e.g. dram bytes")
    p.add_argument("--limit", type=int, default=10)
    p.set_defaults(func=commands.cmd_metrics)

    p = add("skills", help="list the curated metric bundles, or show one's workflow")
    p.add_argument("name", nargs="?", help="a skill to show")
    p.set_defaults(func=commands.cmd_skills)

    p = add("runs", help="list, show or prune kept runs")
    p.add_argument("action", choices=["list", "show", "prune"], nargs="?", default="list")
    p.add_argument("run_id", nargs="?", help="for show")
    p.add_argument("--runs-root", help="runs folder (default: the cache folder)")
    p.add_argument("--limit", type=int, default=50, help="runs listed")
    p.add_argument("--keep", type=int, default=50, help="prune: keep the newest N runs")
    p.add_argument("--max-gb", type=float, default=5.0, help="prune: and at most this size")
    p.set_defaults(func=commands.cmd_runs)

    p = add("doctor", help="check ncu, GPU, counter permission and packages")
    p.add_argument("--probe", action="store_true", help="profile one tiny kernel to be sure")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=commands.cmd_doctor)

    p = add("serve", help="run the MCP server (stdio by default)")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--runs-root", help="folder for run artifacts (default: the cache folder)")
    p.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="where profiling jobs run: this machine's GPUs, or a Ray cluster",
    )
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
    p.add_argument(
        "--token-file", help="HTTP: file holding the bearer token (else $NSIGHT_AGENT_TOKEN)"
    )
    p.add_argument(
        "--allow-dir", action="append", default=[], help="HTTP: a folder reports may be read from"
    )
    p.add_argument("--allow-host", action="append", default=[], help="HTTP: an allowed Host")
    p.add_argument("--allow-origin", action="append", default=[], help="HTTP: an allowed Origin")
    p.set_defaults(func=commands.cmd_serve)

    p = add("demo", help="a real MCP client session against `nsight-agent serve`")
    p.set_defaults(func=commands.cmd_demo)
    _show_defaults(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    try:
        return int(args.func(args))
    except ValidationError as err:
        print(f"error: {validation_text(err)}", file=sys.stderr)
        return 2
    except (InvalidRequestError, UnknownMetricError, ExtractionError) as err:
        # What the caller gave is wrong (arguments, a metric name, a file that is no report).
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NsightAgentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`| head`): stay quiet, and keep Python's exit flush quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
