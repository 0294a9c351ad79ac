"""``nsight-agent``: the same engine for people: profile, report, doctor, serve, demo."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_agent import __version__
from nsight_agent.errors import InvalidRequestError, NsightAgentError


def _value(text: str) -> Any:
    """A config value: JSON when it parses (numbers, lists, true), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_config(pairs: Sequence[str]) -> dict[str, Any]:
    """``["M=1024", "dtype=float16"]`` -> ``{"M": 1024, "dtype": "float16"}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        for item in pair.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or key.strip().startswith("-"):
                raise InvalidRequestError(
                    f"--config expects key=value pairs; got {item!r}.",
                    "Example: --config M=1024 N=512 --config M=2048 N=512",
                )
            out[key.strip()] = _value(value.strip())
    return out


def parse_configs(
    configs: Sequence[Sequence[str]] | None, grid: str | None
) -> list[dict[str, Any]]:
    """The configs of ``--config`` (one per occurrence) and ``--grid`` (JSON: dict of lists or list)."""
    out = [parse_config(c) for c in configs or []]
    if grid:
        try:
            data = json.loads(grid)
        except json.JSONDecodeError as err:
            raise InvalidRequestError(
                f"--grid is not valid JSON: {err}",
                'Example: --grid \'{"M": [1024, 2048], "BLOCK": [64, 128]}\'',
            ) from err
        if isinstance(data, dict):
            keys = list(data)
            values = [v if isinstance(v, list) else [v] for v in data.values()]
            out += [dict(zip(keys, combo)) for combo in itertools.product(*values)]
        elif isinstance(data, list) and all(isinstance(d, dict) for d in data):
            out += data
        else:
            raise InvalidRequestError("--grid must be a JSON object of lists or a list of objects.")
    return out or [{}]


def _metrics(values: Sequence[str] | None) -> list[str]:
    return [m.strip() for v in values or [] for m in v.split(",") if m.strip()]


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_profile(args: argparse.Namespace) -> int:
    from nsight_agent import service
    from nsight_agent.views import common, runs, text

    path = Path(args.file)
    if not path.is_file():
        raise InvalidRequestError(f"No source file at {path}.")
    request = service.build_request(
        source=path.read_text(),
        language=args.language,
        entry=args.entry,
        configs=parse_configs(args.config, args.grid),
        metrics=_metrics(args.metrics),
        skill=args.skill,
        runs=args.runs,
        timeout_s=args.timeout,
        clock_control=args.clock_control,
    )

    def progress(done: int, total: int, message: str) -> None:
        print(f"  {done}/{total} {message}", file=sys.stderr, flush=True)

    run = service.profile(request, on_progress=progress)
    s = runs.profile_summary(run, limit=10_000)
    if args.json:
        print(json.dumps(common.dump(s), indent=1))
    else:
        print(text.render_table(s))
        print(f"\nrun {run.run_id}: artifacts in {run.run_dir}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from nsight_agent.views import common, report, text

    s = report.summarize_report(
        args.file,
        offset=args.offset,
        limit=args.limit,
        findings=args.findings,
        metrics=_metrics(args.metrics),
    )
    print(json.dumps(common.dump(s), indent=1) if args.json else text.render_report(s))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from nsight_agent import service
    from nsight_agent.views import common, text
    from nsight_agent.views.diagnosis import diagnose_report

    options = {"ideal_bytes": args.ideal_bytes, "input_dtypes": args.input_dtype}
    if args.run_id:
        d = service.diagnose_run(args.run_id, offset=args.offset, limit=args.limit, **options)
    else:
        if not args.file:
            raise InvalidRequestError("Give a .ncu-rep, a kernel source file, or --run-id.")
        path = Path(args.file)
        if not path.is_file():
            raise InvalidRequestError(f"No file at {path}.")
        if path.suffix == ".ncu-rep":
            d = diagnose_report(path, offset=args.offset, limit=args.limit, **options)
        else:
            fields = {
                "source": path.read_text(),
                "language": args.language,
                "entry": args.entry,
                "configs": parse_configs(args.config, args.grid),
                "timeout_s": args.timeout,
            }

            def progress(done: int, total: int, message: str) -> None:
                print(f"  {done}/{total} {message}", file=sys.stderr, flush=True)

            d = service.diagnose_source(
                fields, on_progress=progress, deep=not args.no_deep, limit=args.limit, **options
            )
    print(json.dumps(common.dump(d), indent=1) if args.json else text.render_diagnosis(d))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from nsight_agent.engine import device

    info = device.device_info(probe=args.probe)
    print(info.model_dump_json(indent=1) if args.json else device.render(info))
    if not info.can_profile and not args.json:
        print(
            "\nReports can be read here (nsight-agent report FILE.ncu-rep); profiling needs an "
            "NVIDIA GPU, its driver, and Nsight Compute (ncu) with counter access."
        )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from nsight_agent.server.app import serve

    serve(
        args.transport,
        host=args.host,
        port=args.port,
        runs_root=Path(args.runs_root) if args.runs_root else None,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from nsight_agent import demo

    return demo.main([])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nsight-agent",
        description="Nsight Compute profiling for kernel engineers and their coding agents.",
    )
    parser.add_argument("--version", action="version", version=f"nsight-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("profile", help="profile a kernel source file over configs (needs ncu)")
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
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("report", help="summarize an existing .ncu-rep (no GPU needed)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--findings", type=int, default=3, help="ncu findings per kernel")
    p.add_argument("--metrics", action="append", help="extra metrics to show when present")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "diagnose", help="why a kernel is slow: a .ncu-rep, a source file (needs ncu) or a run"
    )
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
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("doctor", help="check ncu, GPU, counter permission and packages")
    p.add_argument("--probe", action="store_true", help="profile one tiny kernel to be sure")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--runs-root", help="folder for run artifacts (default: the pipeline's)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("demo", help="a real MCP client session against `nsight-agent serve`")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except NsightAgentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
