"""The command line as a table: each command its help text and its options, read by
``build_parser``. Options that several commands share are named once below.

Every command's ``--help`` starts with a description (``Command.description``, else its help
line) and every option has a help text (``tests/test_cli_help.py`` checks both)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from nsight_agent import __version__
from nsight_agent.request import MIN_EFFECT_PCT

Option = tuple[tuple[str, ...], dict[str, Any]]
LANGUAGES = ["triton", "torch", "torch_compile", "cuda", "kernelbench"]


def opt(*flags: str, **kwargs: Any) -> Option:
    return flags, kwargs


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: list[Option] = field(default_factory=list)
    description: str = ""  # the top of `nsight-agent NAME --help`; default: `help`


CONFIG = opt(
    "--config",
    nargs="+",
    action="append",
    metavar="KEY=VALUE",
    help="one config (repeat for more), e.g. --config M=1024 N=512",
)
GRID = opt("--grid", help='JSON grid: {"M": [1024, 2048]}')
LANGUAGE = opt(
    "--language",
    choices=LANGUAGES,
    help="how the source runs (default: kernelbench for a KernelBench problem, cuda for a "
    "source with CUDA_SOURCE, else triton)",
)
CORRECTNESS = opt(
    "--correctness",
    choices=["default", "kernelbench"],
    help="kernelbench: add KernelBench's seeded trials and tolerances to our checks, and its "
    "timing",
)
JSON = opt("--json", action="store_true", help="print the answer as JSON (for scripts)")
TIMEOUT = opt("--timeout", type=float, default=600, help="seconds")
CLOCKS = opt(
    "--clock-control",
    choices=["base", "none"],
    default="none",
    help="base: ncu locks the GPU clocks to base (steadier, slower than boost)",
)
METHOD = opt(
    "--method",
    choices=["ncu", "timing"],
    default="ncu",
    help="timing: a warm worker times the calls (CUPTI or CUDA events; perf_counter on a CPU), "
    "no ncu",
)
OFFSET = opt("--offset", type=int, default=0, help="first kernel (or result) shown")
RUNS_ROOT = opt("--runs-root", help="runs folder (default: the cache folder)")

COMMANDS = [
    Command(
        "profile",
        "profile a kernel source file over configs (needs ncu)",
        [
            opt("file", help="Python source with setup() and the entry, or a KernelBench problem"),
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
            opt("--skill", help="a curated metric bundle (`nsight-agent skills` lists them)"),
            opt("--runs", type=int, default=5, help="measured runs per config"),
            TIMEOUT,
            CLOCKS,
            opt("--json", action="store_true", help="print the compact JSON answer"),
            METHOD,
            CORRECTNESS,
            RUNS_ROOT,
        ],
    ),
    Command(
        "report",
        "summarize an existing .ncu-rep (no GPU needed)",
        [
            opt("file", help="an .ncu-rep written by ncu (any tool, any GPU)"),
            JSON,
            OFFSET,
            opt("--limit", type=int, default=20, help="kernels shown in full"),
            opt("--findings", type=int, default=3, help="ncu findings per kernel"),
            opt(
                "--metrics",
                action="append",
                help="extra metrics to show (comma-separated or repeated); an unknown name is "
                "an error",
            ),
        ],
    ),
    Command(
        "diagnose",
        "why a kernel is slow: a .ncu-rep, a source file (needs ncu) or a run",
        [
            opt(
                "file",
                nargs="?",
                help=".ncu-rep to read, kernel source to profile, or the id of an earlier run",
            ),
            opt("--run-id", help="diagnose an earlier run (its id may also be given as FILE)"),
            RUNS_ROOT,
            CONFIG,
            GRID,
            LANGUAGE,
            opt("--entry", default="run", help="function that launches the kernel"),
            opt("--timeout", type=float, default=900, help="seconds"),
            opt(
                "--no-deep",
                action="store_true",
                help="the cheap sections only (bound, launch, occupancy, roofline)",
            ),
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
            opt(
                "file",
                help="Python source defining setup() and the variants' entries, or a "
                "KernelBench problem",
            ),
            opt(
                "--variant",
                action="append",
                metavar="NAME[=ENTRY]",
                help="a variant (at least two)",
            ),
            opt(
                "--candidate",
                action="append",
                metavar="FILE",
                help="a source of its own (a KernelBench ModelNew), compared with the problem's "
                "Model; repeatable",
            ),
            CORRECTNESS,
            opt(
                "--kernelbench-result",
                action="store_true",
                help="print KernelBench's result fields (compiled, correctness, runtime, "
                "ref_runtime, speedup by its timing) with our verdict; implies --correctness "
                "kernelbench",
            ),
            opt(
                "--time-basis",
                choices=["gpu", "call"],
                help="what verdicts compare: gpu (the calls' kernel time) or call (each call "
                "timed end to end); default call under --correctness kernelbench, else gpu",
            ),
            opt("--num-correct-trials", type=int, help="KernelBench's correctness trials (5)"),
            opt("--num-perf-trials", type=int, help="KernelBench's timed trials (100)"),
            opt("--baseline", help="variant the others are compared to (default: the first)"),
            CONFIG,
            GRID,
            LANGUAGE,
            opt("--runs", type=int, default=10, help="measured runs per config"),
            opt(
                "--min-effect",
                type=float,
                metavar="PCT",
                help=f"smallest change called faster/slower (default {MIN_EFFECT_PCT:g}%%)",
            ),
            TIMEOUT,
            CLOCKS,
            JSON,
            METHOD,
            RUNS_ROOT,
        ],
    ),
    Command(
        "metrics",
        "search ncu metric names and descriptions (no GPU needed)",
        [
            opt("query", nargs="+", help="words or a metric name, e.g. dram bytes"),
            opt("--limit", type=int, default=10, help="metrics shown"),
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
            opt(
                "action",
                choices=["list", "show", "prune"],
                nargs="?",
                default="list",
                help="list the runs, show one, or prune old ones",
            ),
            opt("run_id", nargs="?", help="for show"),
            RUNS_ROOT,
            opt("--limit", type=int, default=50, help="runs listed, or results shown"),
            opt("--offset", type=int, default=0, help="show: first result shown"),
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
            opt(
                "--transport",
                choices=["stdio", "streamable-http"],
                default="stdio",
                help="stdio: for an agent that starts the server; streamable-http: a server "
                "that clients connect to",
            ),
            opt("--host", default="127.0.0.1", help="HTTP: address to listen on"),
            opt("--port", type=int, default=8000, help="HTTP: port to listen on"),
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
            opt("--allow-host", action="append", default=[], help="HTTP: an allowed Host header"),
            opt(
                "--allow-origin", action="append", default=[], help="HTTP: an allowed Origin header"
            ),
        ],
        "Run nsight-agent as an MCP server: the profiling tools (profile_kernel, "
        "compare_variants, diagnose_kernel, summarize_report, ...) for a coding agent. On "
        "stdio (the default) the agent starts this command itself and talks to it over "
        "stdin/stdout; with --transport streamable-http it listens on --host:--port (loopback "
        "unless a token is set; docs/SECURITY.md). Logs go to stderr. With a GPU and ncu it "
        "answers once its warm worker and first pre-launched ncu target are up and one "
        "throwaway profile ran through them (at most NSIGHT_AGENT_WARM_WAIT_S seconds, default "
        "25; 0 answers at once), so that its first profile costs what its later ones do.",
    ),
    Command("demo", "a real MCP client session against `nsight-agent serve`"),
    Command(
        "baseline",
        "name a run as a baseline, list or remove baselines (docs/BASELINES.md)",
        [
            opt(
                "action",
                choices=["set", "list", "remove"],
                nargs="?",
                default="list",
                help="set NAME RUN_ID, list, or remove NAME",
            ),
            opt("name", nargs="?", help="baseline name, e.g. main"),
            opt("run_id", nargs="?", help="for set: the run to name"),
            opt("--variant", help="for set: the variant of a run with several"),
            RUNS_ROOT,
            JSON,
        ],
    ),
    Command(
        "diff",
        "compare a run with a baseline or another run; exit 3 when not comparable",
        [
            opt("run", help="run id or baseline name (NAME@VARIANT for one variant)"),
            opt("against", help="baseline name or run id to compare with"),
            opt("--threshold", type=float, help="regression only when slower by >= PCT %%"),
            RUNS_ROOT,
            JSON,
        ],
    ),
    Command(
        "check",
        "regression gate: time SOURCE as the baseline was; exit 0 ok, 1 regression, 2 usage, "
        "3 not comparable",
        [
            opt("file", help="kernel source (same contract and entry as the baseline's)"),
            opt("--baseline", required=True, help="baseline name"),
            opt(
                "--threshold",
                type=float,
                help="also slower by >= PCT %% to fail (default: the drift)",
            ),
            opt("--entry", help="entry function (default: the baseline variant's)"),
            opt(
                "--remeasure",
                action="store_true",
                help="when not comparable, time the stored baseline and SOURCE in one run",
            ),
            RUNS_ROOT,
            JSON,
        ],
    ),
    Command(
        "history",
        "a kernel's trend over its runs: baseline NAME or source hash",
        [
            opt("key", help="baseline name, or source hash (prefix) from a listing"),
            opt("--plot", metavar="FILE.png", help="also draw it"),
            opt("--limit", type=int, default=50, help="newest runs shown"),
            RUNS_ROOT,
            JSON,
        ],
    ),
]


def build(handlers: dict[str, Any]) -> argparse.ArgumentParser:
    """The parser of ``COMMANDS``; ``handlers`` maps each command to the function it runs."""
    parser = argparse.ArgumentParser(
        prog="nsight-agent",
        description="Nsight Compute profiling for kernel engineers and their coding agents. "
        "Exit codes: 0 ok, 1 failure (for check: a regression), 2 usage error, 3 not "
        "comparable (check, diff).",
    )
    parser.add_argument("--version", action="version", version=f"nsight-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        about = command.description or command.help[:1].upper() + command.help[1:] + "."
        p = sub.add_parser(command.name, help=command.help, description=about)
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
