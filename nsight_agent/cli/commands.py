"""The commands of ``nsight-agent``: each parses nothing, calls the service layer, prints."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_agent.errors import InvalidRequestError


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

    run = _measure(request, args.method, progress)
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
    """Exit 0 only when this machine can profile; otherwise say why and exit 1."""
    from nsight_agent.engine import device

    info = device.device_info(probe=args.probe)
    print(info.model_dump_json(indent=1) if args.json else device.render(info))
    if info.can_profile:
        return 0
    why = "; ".join(info.unknown[:3]) or "no usable GPU with ncu and counter access"
    print(
        f"\ncannot profile here: {why}. Reports can still be read (nsight-agent report "
        "FILE.ncu-rep); profiling needs an NVIDIA GPU, its driver, and Nsight Compute (ncu) "
        "with counter access.",
        file=sys.stderr,
    )
    return 1


def cmd_compare(args: argparse.Namespace) -> int:
    from nsight_agent import service
    from nsight_agent.views import common, compare, text

    path = Path(args.file)
    if not path.is_file():
        raise InvalidRequestError(f"No source file at {path}.")
    variants = []
    for item in args.variant or []:
        name, _, entry = item.partition("=")
        variants.append({"name": name.strip(), "entry": (entry or name).strip()})
    if len(variants) < 2:
        raise InvalidRequestError(
            "compare needs at least two --variant NAME[=ENTRY].",
            "Example: --variant eager=run_ref --variant fused=run",
        )
    request = service.build_request(
        source=path.read_text(),
        language=args.language,
        variants=variants,
        baseline=args.baseline or variants[0]["name"],
        configs=parse_configs(args.config, args.grid),
        runs=args.runs,
        timeout_s=args.timeout,
        clock_control=args.clock_control,
    )
    run = _measure(request, args.method, _progress)
    s = compare.compare_summary(run, baseline=args.baseline, limit=10_000)
    print(json.dumps(common.dump(s), indent=1) if args.json else text.render_compare(s))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from nsight_agent.catalog import metrics as catalog
    from nsight_agent.catalog.search import search_metrics

    found = search_metrics(" ".join(args.query), args.limit)
    for m in found:
        print(f"{m.example}  ({m.type}, {m.unit or '-'}): {m.description}")
    print(f"[{catalog.catalog_source().label}]", file=sys.stderr)
    return 0 if found else 1


def cmd_skills(args: argparse.Namespace) -> int:
    from nsight_agent.catalog import skills

    if args.name:
        print(skills.get_skill(args.name).skill_md)
        return 0
    for b in skills.list_skills():
        print(f"{b.name:14} {b.description}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from nsight_agent import service
    from nsight_agent.views import runs, text

    root = Path(args.runs_root) if args.runs_root else None
    if args.action == "list":
        listing = service.list_runs(root, limit=args.limit)
        print(f"# {listing['runs_root']}", file=sys.stderr)
        for run_id in listing["runs"]:
            print(run_id)
    elif args.action == "show":
        if not args.run_id:
            raise InvalidRequestError("runs show needs a run id: nsight-agent runs show RUN_ID")
        print(text.render_profile(runs.profile_summary(service.load_run(args.run_id, root))))
    else:
        pruned = service.prune_runs(root, keep=args.keep, max_gb=args.max_gb)
        print(f"removed {len(pruned.removed)} run(s), {pruned.freed_bytes / 1e6:.1f} MB")
    return 0


def _measure(request: Any, method: str, progress: Any) -> Any:
    """Under ncu, or (``--method timing``) timed on a warm worker started for this command."""
    from nsight_agent import service
    from nsight_agent.engine.worker.pool import WorkerPool

    if method == "timing":
        with WorkerPool() as pool:
            return service.time_only(request, pool)
    return service.profile(request, on_progress=progress)


def _progress(done: int, total: int, message: str) -> None:
    print(f"  {done}/{total} {message}", file=sys.stderr, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from nsight_agent.server.app import serve

    if args.transport == "stdio" and sys.stdin.isatty():
        print(
            "nsight-agent serve: an MCP server on stdio, waiting for an MCP client (this is "
            "not an interactive prompt). Configure your agent to run `nsight-agent serve`; "
            "press Ctrl-C to quit.",
            file=sys.stderr,
        )

    serve(
        args.transport,
        host=args.host,
        port=args.port,
        runs_root=Path(args.runs_root) if args.runs_root else None,
        executor=args.executor,
        ray_address=args.ray_address,
        token_file=Path(args.token_file) if args.token_file else None,
        allow_dirs=tuple(Path(d) for d in args.allow_dir),
        allowed_hosts=tuple(args.allow_host),
        allowed_origins=tuple(args.allow_origin),
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from nsight_agent import demo

    return demo.main([])
