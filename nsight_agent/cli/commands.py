"""The commands of ``nsight-agent``: each parses nothing, calls the service layer, prints
(``cli/output.py``: tables on a terminal, plain text in a pipe, ``--json`` as it was)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nsight_agent.cli.output as output
from nsight_agent.errors import InvalidRequestError
from nsight_agent.stages import VALIDATION


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


REPORT_MAGIC = b"NVR\0"


def is_report(path: Path) -> bool:
    """A .ncu-rep by name or by its first bytes (ncu writes ``NVR\\0`` first)."""
    if path.suffix == ".ncu-rep":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == REPORT_MAGIC
    except OSError:
        return False


def kernel_source(path: Path, command: str) -> str:
    """The text of a kernel source file (UTF-8), refused at once when there is none or it is
    not text. Whether it is Python and follows the contract, the validation stage judges
    (``service/validate.py``), naming this file (``source_files``)."""
    if not path.is_file():
        raise InvalidRequestError(f"No file at {path}.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRequestError(
            f"{path} is neither an Nsight Compute report nor Python source (not UTF-8 text).",
            f"{command} takes a .ncu-rep report or a kernel source file (Python, with setup() "
            "and the entry).",
        ) from err


def source_files(main: str, candidates: dict[str, str] | None = None) -> dict[str, str]:
    """The file each source came from, as the validation stage names them in its messages:
    "" for the main FILE, a variant's name for its ``--candidate`` file."""
    return {"": main, **(candidates or {})}


def dump_json(model: Any) -> str:
    from nsight_agent.views import common

    return json.dumps(common.dump(model), indent=1)


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_profile(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text

    path = Path(args.file)
    run = measure_source(
        args.method,
        f"profiling {path.name}",
        files=source_files(args.file),
        source=kernel_source(path, "profile"),
        language=args.language,
        entry=args.entry,
        configs=parse_configs(args.config, args.grid),
        metrics=_metrics(args.metrics),
        skill=args.skill,
        runs=args.runs,
        timeout_s=args.timeout,
        clock_control=args.clock_control,
        correctness=args.correctness,
    )
    s = summaries.profile_summary(run, limit=10_000)
    if args.json:
        print(dump_json(s))
        return 0
    label = runs.metric_labels(run)
    output.show(text.render_table(s, label), tables.profile(s, label))
    print(f"\nrun {run.run_id}: artifacts in {run.run_dir}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import text

    options: dict[str, Any] = {"offset": args.offset, "limit": args.limit}
    options |= {"findings": args.findings, "metrics": _metrics(args.metrics)}
    if args.json:
        print(dump_json(summaries.report_summary(args.file, **options)))
        return 0
    s, step_view = summaries.report_and_step(args.file, **options)
    # The whole step first, when the report holds several groups.
    step = text.step_lines(step_view)
    if step:
        output.show("\n".join(step))
    output.show(text.render_report(s), tables.report(s))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    # A file that is neither a report nor text is refused before anything heavy is imported;
    # one that is not Python, by the validation stage (before any run folder exists).
    path = Path(args.file) if args.file else None
    source = None
    if not args.run_id:
        if path is None:
            raise InvalidRequestError("Give a .ncu-rep, a kernel source file, or --run-id.")
        if not (path.is_file() and is_report(path)):
            source = kernel_source(path, "diagnose")

    import nsight_agent.cli.tables as tables
    from nsight_agent.service import diagnose
    from nsight_agent.service.measure import Measuring
    from nsight_agent.views import text

    options = {"ideal_bytes": args.ideal_bytes, "input_dtypes": args.input_dtype}
    if args.run_id:
        d = diagnose.diagnose_run(args.run_id, offset=args.offset, limit=args.limit, **options)
    elif source is None:
        assert path is not None
        d = diagnose.diagnose_file(path, offset=args.offset, limit=args.limit, **options)
    else:
        assert path is not None
        fields: dict[str, Any] = {
            "source": source,
            "language": args.language,
            "entry": args.entry,
            "configs": parse_configs(args.config, args.grid),
            "timeout_s": args.timeout,
        }
        with output.progress(f"diagnosing {path.name} under ncu") as progress:
            progress(0, 0, VALIDATION)
            where = Measuring(on_progress=progress)
            d = diagnose.diagnose_source(
                fields,
                where,
                deep=not args.no_deep,
                limit=args.limit,
                files=source_files(args.file),
                **options,
            )
    if args.json:
        print(dump_json(d))
    else:
        output.show(text.render_diagnosis(d), tables.diagnosis(d))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 0 only when this machine can profile; otherwise say why and exit 1."""
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import session
    from nsight_agent.views import device as device_views

    info = session.device_info(probe=args.probe)
    if args.json:
        print(info.model_dump_json(indent=1))
    else:
        install = device_views.install_lines(info)
        output.show(device_views.render_device(info), tables.doctor(info, install))
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


def cmd_metrics(args: argparse.Namespace) -> int:
    from rich.table import Table

    from nsight_agent.catalog import metrics as catalog
    from nsight_agent.catalog.search import close_names, search_metrics

    query = " ".join(args.query)
    found = search_metrics(query, args.limit)
    table = Table("metric", "type", "unit", "description", header_style="bold", pad_edge=False)
    for m in found:
        table.add_row(m.example, m.type, m.unit or "", m.description)
    plain = "\n".join(f"{m.example}  ({m.type}, {m.unit or '-'}): {m.description}" for m in found)
    if found:
        output.show(plain, table)
    else:
        close = close_names(query)
        offer = f"; close: {', '.join(close)}" if close else ""
        print(f"no metric matches {query!r}{offer}", file=sys.stderr)
    print(f"[{catalog.catalog_source().label}]", file=sys.stderr)
    return 0 if found else 1


def cmd_skills(args: argparse.Namespace) -> int:
    from rich.table import Table

    from nsight_agent.catalog import skills

    if args.name:
        print(skills.get_skill(args.name).skill_md)
        return 0
    table = Table("skill", "what it is for", header_style="bold", pad_edge=False)
    bundles = skills.list_skills()
    for b in bundles:
        table.add_row(b.name, b.description)
    output.show("\n".join(f"{b.name:14} {b.description}" for b in bundles), table)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from nsight_agent.service import runs as run_store

    root = Path(args.runs_root) if args.runs_root else None
    if args.action == "list":
        import nsight_agent.cli.tables as tables

        listing = run_store.list_runs(root, limit=args.limit)
        if output.rich_stdout():
            output.show(
                "", tables.runs_list(listing["runs_root"], listing["runs"], listing["status"])
            )
        else:
            print(f"# {listing['runs_root']}", file=sys.stderr)
            for run_id in listing["runs"]:
                print(run_id)
    elif args.action == "show":
        if not args.run_id:
            raise InvalidRequestError("runs show needs a run id: nsight-agent runs show RUN_ID")
        return show_run(args.run_id, root, offset=args.offset, limit=args.limit)
    else:
        pruned = run_store.prune_runs(root, keep=args.keep, max_gb=args.max_gb)
        print(f"removed {len(pruned.removed)} run(s), {pruned.freed_bytes / 1e6:.1f} MB")
    return 0


def show_run(run_id: str, root: Path | None, *, offset: int = 0, limit: int = 50) -> int:
    """A kept run: its table, or (a run that did not pass) its failure, exit 1."""
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import runs as run_store
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text

    run = run_store.load_run(run_id, root)
    s = summaries.profile_summary(run, offset=offset, limit=limit)
    status = run.status
    if status != "passed":
        failure = dict(run.failure or {}) | {"status": status}
        plain = f"run {run_id} {status.upper()} at {failure.get('stage')}: {failure.get('message')}"
        rest = [w for w in s.warnings or [] if run_id not in w]
        output.show(
            "\n".join([plain, *(f"warning: {w}" for w in rest)]),
            tables.failed_run(run_id, failure, rest),
        )
        return 1
    label = runs.metric_labels(run)
    output.show(text.render_profile(s, label), tables.profile(s, label))
    return 0


def measure_source(method: str, stage: str, **fields: Any) -> Any:
    """The request of ``fields`` under ncu, or (``--method timing``) timed on a warm worker
    started for this command; its stages on stderr (a spinner, or lines in a pipe)."""
    from nsight_agent.service import profile
    from nsight_agent.service.measure import Measuring

    how = ": timing (warm worker, no ncu)" if method == "timing" else " under ncu"
    with output.progress(stage + how) as progress:
        progress(0, 0, VALIDATION)
        where = Measuring(on_progress=progress)
        return profile.profile(where, "timing" if method == "timing" else "ncu", **fields)


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
