"""The command line as a table: each command its help text and its options, read by
``build_parser``. Options that several commands share are named once below."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from nsight_agent import __version__

Option = tuple[tuple[str, ...], dict[str, Any]]
LANGUAGES = ["triton", "torch", "torch_compile", "cuda"]


def opt(*flags: str, **kwargs: Any) -> Option:
    return flags, kwargs


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: list[Option] = field(default_factory=list)


CONFIG = opt("--config", nargs="+", action="append", metavar="KEY=VALUE")
GRID = opt("--grid", help='JSON grid: {"M": [1024, 2048]}')
LANGUAGE = opt("--language", choices=LANGUAGES, default="triton")
JSON = opt("--json", action="store_true")
TIMEOUT = opt("--timeout", type=int, default=600, help="seconds")
CLOCKS = opt("--clock-control", choices=["base", "none"], default="none")
METHOD = opt(
    "--method", choices=["ncu", "timing"], default="ncu", help="timing: CUDA events, no ncu"
)
OFFSET = opt("--offset", type=int, default=0)
RUNS_ROOT = opt("--runs-root", help="runs folder (default: the cache folder)")

COMMANDS = [
    Command(
        "profile",
        "profile a kernel source file over configs (needs ncu)",
        [
            opt("file", help="Python source with setup() and the entry function"),
            opt(
                "--config",
                nargs="+",
                action="append",
                metavar="KEY=VALUE",
                help="one config (repeat for more), e.g. --config M=1024 N=512",
            ),
            opt("--grid", help='JSON grid: {"M": [1024, 2048]} or a list of objects'),
            LANGUAGE,
            opt("--entry", default="run", help="function that launches the kernel"),
            opt("--metrics", action="append", help="metric names (comma-separated or repeated)"),
            opt("--skill", help="a curated metric bundle (see the list_skills tool)"),
            opt("--runs", type=int, default=5),
            TIMEOUT,
            CLOCKS,
            opt("--json", action="store_true", help="print the compact JSON answer"),
            METHOD,
        ],
    ),
    Command(
        "report",
        "summarize an existing .ncu-rep (no GPU needed)",
        [
            opt("file"),
            JSON,
            OFFSET,
            opt("--limit", type=int, default=20),
            opt("--findings", type=int, default=3, help="ncu findings per kernel"),
            opt("--metrics", action="append", help="extra metrics to show when present"),
        ],
    ),
    Command(
        "diagnose",
        "why a kernel is slow: a .ncu-rep, a source file (needs ncu) or a run",
        [
            opt("file", nargs="?", help=".ncu-rep to read, or kernel source to profile"),
            opt("--run-id", help="diagnose an earlier run instead"),
            CONFIG,
            GRID,
            LANGUAGE,
            opt("--entry", default="run"),
            opt("--timeout", type=int, default=900, help="seconds"),
            opt("--no-deep", action="store_true", help="first pass only (one ncu run)"),
            opt("--ideal-bytes", type=float, help="bytes one kernel must move"),
            opt("--input-dtype", action="append", help="e.g. bfloat16 (repeatable)"),
            OFFSET,
            opt("--limit", type=int, default=3, help="kernels diagnosed in full"),
            JSON,
        ],
    ),
    Command(
        "compare",
        "time variants of a kernel against a baseline (needs ncu)",
        [
            opt("file", help="Python source defining setup() and the variants' entries"),
            opt(
                "--variant",
                action="append",
                metavar="NAME[=ENTRY]",
                help="a variant (at least two)",
            ),
            opt("--baseline", help="variant the others are compared to (default: the first)"),
            CONFIG,
            GRID,
            LANGUAGE,
            opt("--runs", type=int, default=10, help="measured runs per config"),
            TIMEOUT,
            CLOCKS,
            JSON,
            METHOD,
        ],
    ),
    Command(
        "metrics",
        "search ncu metric names and descriptions (no GPU needed)",
        [
            opt("query", nargs="+", help="words or a metric name, e.g. dram bytes"),
            opt("--limit", type=int, default=10),
        ],
    ),
    Command(
        "skills",
        "list the curated metric bundles, or show one's workflow",
        [opt("name", nargs="?", help="a skill to show")],
    ),
    Command(
        "runs",
        "list, show or prune kept runs",
        [
            opt("action", choices=["list", "show", "prune"], nargs="?", default="list"),
            opt("run_id", nargs="?", help="for show"),
            RUNS_ROOT,
            opt("--limit", type=int, default=50, help="runs listed"),
            opt("--keep", type=int, default=50, help="prune: keep the newest N runs"),
            opt("--max-gb", type=float, default=5.0, help="prune: and at most this size"),
        ],
    ),
    Command(
        "doctor",
        "check ncu, GPU, counter permission and packages",
        [opt("--probe", action="store_true", help="profile one tiny kernel to be sure"), JSON],
    ),
    Command(
        "serve",
        "run the MCP server (stdio by default)",
        [
            opt("--transport", choices=["stdio", "streamable-http"], default="stdio"),
            opt("--host", default="127.0.0.1"),
            opt("--port", type=int, default=8000),
            opt("--runs-root", help="folder for run artifacts (default: the cache folder)"),
            opt(
                "--executor",
                choices=["local", "ray"],
                default="local",
                help="where profiling jobs run: this machine's GPUs, or a Ray cluster",
            ),
            opt("--ray-address", help="an existing Ray cluster (default: start a local one)"),
            opt(
                "--token-file",
                help="HTTP: file holding the bearer token (else $NSIGHT_AGENT_TOKEN)",
            ),
            opt(
                "--allow-dir",
                action="append",
                default=[],
                help="HTTP: a folder reports may be read from",
            ),
            opt("--allow-host", action="append", default=[], help="HTTP: an allowed Host"),
            opt("--allow-origin", action="append", default=[], help="HTTP: an allowed Origin"),
        ],
    ),
    Command("demo", "a real MCP client session against `nsight-agent serve`"),
]


def build(handlers: dict[str, Any]) -> argparse.ArgumentParser:
    """The parser of ``COMMANDS``; ``handlers`` maps each command to the function it runs."""
    parser = argparse.ArgumentParser(
        prog="nsight-agent",
        description="Nsight Compute profiling for kernel engineers and their coding agents. "
        "Exit codes: 0 ok, 1 failure, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"nsight-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        for flags, kwargs in command.options:
            p.add_argument(*flags, **kwargs)
        p.set_defaults(func=handlers[command.name])
    _show_defaults(parser)
    return parser


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
